"""What a --help text lists, read independently of the completion scripts'
own parser (completions/help.awk): shared by test_man.py and
test_completion.py."""
import re
import subprocess


def help_of(*argv):
    return subprocess.run([str(a) for a in argv] + ["--help"], capture_output=True, text=True, timeout=60).stdout


def options(text):
    """The -x and --long words that start the option lines of a help text
    (indented by one to four spaces; deeper lines continue a description)."""
    opts = set()
    for line in text.splitlines():
        m = re.match(r" {1,4}((?:--?[a-zA-Z][\w-]*)(?:[ =][^,\s]+)?(?:,\s*--?[a-zA-Z][\w-]*(?:[ =][^,\s]+)?)*)", line)
        if m:
            opts.update(re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", m.group(1)))
    return opts


def commands(text):
    """The commands of `rankplan --help`."""
    return re.findall(r"^  ([a-z][a-z-]*)\b", text.split("commands:", 1)[1].split("options:", 1)[0], re.M)
