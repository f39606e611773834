/* Unit tests for util.c: checked arithmetic, SHA-256, string buffers. */
#include "t.h"
#include "util.h"

static void test_checked(void) {
  int64_t r = 0;
  T_CHECK(ck_add(1, 2, &r) && r == 3);
  T_CHECK(!ck_add(INT64_MAX, 1, &r));
  T_CHECK(!ck_mul(INT64_MAX / 2 + 1, 2, &r));
  T_CHECK(ck_mul(-4, 5, &r) && r == -20);
  T_CHECK(!ck_sub(INT64_MIN, 1, &r));
  CkState st = {true};
  int64_t v = ckm(&st, cka(&st, 1, 2), 3);
  T_CHECK(st.ok && v == 9);
  ckm(&st, INT64_MAX, 3);
  T_CHECK(!st.ok);
}

static void test_sha256(void) {
  char hex[65];
  rp_sha256_hex("", 0, hex);
  T_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  rp_sha256_hex("abc", 3, hex);
  T_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  rp_sha256_hex(m, strlen(m), hex);
  T_EQ_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_strbuf(void) {
  StrBuf sb;
  sb_init(&sb);
  for (int i = 0; i < 1000; i++) sb_printf(&sb, "%d,", i);
  T_CHECK(sb.len > 2000);
  char *s = sb_take(&sb);
  T_CHECK(strncmp(s, "0,1,2,", 6) == 0);
  free(s);
  char buf[32];
  T_EQ_STR(rp_fmt_bytes(1536, buf, sizeof buf), "1.50 KiB");
  T_EQ_STR(rp_fmt_bytes(12, buf, sizeof buf), "12 B");
}

int main(void) {
  T_RUN(test_checked);
  T_RUN(test_sha256);
  T_RUN(test_strbuf);
  T_DONE();
}
