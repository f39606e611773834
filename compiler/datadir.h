/*
 * datadir.h: where rankplan finds the data it ships (the preset catalog,
 * the example specs, the Lua hooks, the JSON schemas), laid out as in the
 * source tree: plans/catalog, plans/examples, lua, schemas.
 *
 * The data directory is found from the executable's own location
 * (/proc/self/exe), never from a path compiled in for the running copy:
 *
 *   - an executable started from the build directory it was built in, or
 *     a directory below it (an uninstalled build: `ninja -C build`, `meson
 *     test`, the test programs), uses the source tree it was built from;
 *   - any other copy uses RP_DATADIR_FROM_BINDIR (meson.build: the
 *     configured datadir/rankplan relative to the configured bindir,
 *     "../share/rankplan" by default) from the executable's directory, so
 *     an installed tree still works when moved (DESTDIR, `dpkg -x`);
 *   - only when the executable's location cannot be read (no /proc) the
 *     configured absolute path RP_DATADIR (prefix/datadir/rankplan).
 *
 * RANKPLAN_CATALOG, then --catalog, override the catalog (spec.h).
 */
#ifndef RANKPLAN_DATADIR_H
#define RANKPLAN_DATADIR_H

/* The data directory, computed once (the string is kept). */
const char *rp_data_dir(void);

/* The default catalog: rp_data_dir()/plans/catalog (kept). */
const char *rp_data_catalog(void);

#endif
