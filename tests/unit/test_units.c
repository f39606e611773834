/* Unit tests for units.c: decimal vs binary prefixes, bits vs bytes, exact
 * memory, every error status. */
#include "t.h"
#include "units.h"

static UnitsStatus p(const char *s, UnitKind k, UnitValue *u) { return units_parse(s, k, u); }

static void test_memory(void) {
  UnitValue u;
  T_EQ_INT(p("141 GB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 141000000000LL);
  T_EQ_INT(p("96 GiB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 96LL << 30);
  T_EQ_INT(p("512 MiB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 512LL << 20);
  T_EQ_INT(p("80GB", UNIT_MEMORY, &u), UNITS_OK); /* space optional */
  T_EQ_INT(u.bytes, 80000000000LL);
  T_EQ_INT(p("1.5 GiB", UNIT_MEMORY, &u), UNITS_OK); /* exact, not via double */
  T_EQ_INT(u.bytes, 1610612736LL);
  T_EQ_INT(p("2 kB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 2000);
  T_EQ_INT(p("2 KB", UNIT_MEMORY, &u), UNITS_OK); /* KB is decimal, like kB */
  T_EQ_INT(u.bytes, 2000);
  T_EQ_INT(p("2 KiB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 2048);
  T_EQ_INT(p("7 B", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 7);
  T_EQ_INT(p("1 TiB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 1LL << 40);
  T_EQ_INT(p("0.50 TB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 500000000000LL);
  T_EQ_INT(p(" 3 MB ", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 3000000);
  /* exactness and range */
  T_EQ_INT(p("1.5 B", UNIT_MEMORY, &u), UNITS_NOT_WHOLE);
  T_EQ_INT(p("1.0000000001 KB", UNIT_MEMORY, &u), UNITS_NOT_WHOLE);
  T_EQ_INT(p("8 EB", UNIT_MEMORY, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_INT(p("8192 PiB", UNIT_MEMORY, &u), UNITS_OVERFLOW); /* 2^63 bytes */
  T_EQ_INT(p("8191 PiB", UNIT_MEMORY, &u), UNITS_OK);
  T_EQ_INT(u.bytes, 8191LL << 50);
  T_EQ_INT(p("99999999999999999999 B", UNIT_MEMORY, &u), UNITS_OVERFLOW);
  T_EQ_INT(p("1e3 GB", UNIT_MEMORY, &u), UNITS_BAD_NUMBER); /* memory is exact digits */
  T_EQ_INT(p("-1 GB", UNIT_MEMORY, &u), UNITS_NEGATIVE);
  /* Memory is bytes only (docs/spec.md): bits are an unknown memory unit,
   * and the suggestion is the byte unit with the same letters. */
  T_EQ_INT(p("80 Gb", UNIT_MEMORY, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_STR(u.suggest, "GB");
  T_EQ_INT(p("80 gib", UNIT_MEMORY, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_STR(u.suggest, "GiB");
}

static void test_bandwidth(void) {
  UnitValue u;
  T_EQ_INT(p("4.8 TB/s", UNIT_BANDWIDTH, &u), UNITS_OK);
  T_NEAR(u.value, 4.8e12, 1e-12);
  T_EQ_INT(p("450 GB/s", UNIT_BANDWIDTH, &u), UNITS_OK);
  T_NEAR(u.value, 450e9, 1e-12);
  T_EQ_INT(p("400 Gb/s", UNIT_BANDWIDTH, &u), UNITS_OK); /* bits: / 8 */
  T_NEAR(u.value, 50e9, 1e-12);
  T_EQ_INT(p("400 Gbps", UNIT_BANDWIDTH, &u), UNITS_OK);
  T_NEAR(u.value, 50e9, 1e-12);
  T_EQ_INT(p("1 GiB/s", UNIT_BANDWIDTH, &u), UNITS_OK);
  T_NEAR(u.value, 1073741824.0, 1e-12);
  T_EQ_INT(p("50 GB", UNIT_BANDWIDTH, &u), UNITS_WRONG_KIND);
  T_EQ_INT(u.got, UNIT_MEMORY);
  T_EQ_INT(p("3.35 tb/s", UNIT_BANDWIDTH, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_STR(u.suggest, "TB/s"); /* same letters, other case, first */
  T_EQ_INT(p("3.35 TBs", UNIT_BANDWIDTH, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_STR(u.unit, "TBs");
  T_EQ_INT(p("3350", UNIT_BANDWIDTH, &u), UNITS_MISSING_UNIT);
}

static void test_compute_time_rate(void) {
  UnitValue u;
  T_EQ_INT(p("989 TFLOP/s", UNIT_COMPUTE, &u), UNITS_OK);
  T_NEAR(u.value, 989e12, 1e-12);
  T_EQ_INT(p("989 TFLOPS", UNIT_COMPUTE, &u), UNITS_OK);
  T_NEAR(u.value, 989e12, 1e-12);
  T_EQ_INT(p("2.25 PFLOP/s", UNIT_COMPUTE, &u), UNITS_OK);
  T_NEAR(u.value, 2.25e15, 1e-12);
  T_EQ_INT(p("1979 TOPS", UNIT_COMPUTE, &u), UNITS_OK);
  T_NEAR(u.value, 1979e12, 1e-12);
  T_EQ_INT(p("3 TFLOPs", UNIT_COMPUTE, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_INT(p("50 ms", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 0.05, 1e-12);
  T_EQ_INT(p("250 us", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 250e-6, 1e-12);
  T_EQ_INT(p("250 \xc2\xb5s", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 250e-6, 1e-12);
  T_EQ_INT(p("1.5 s", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 1.5, 1e-12);
  T_EQ_INT(p("2 min", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 120, 1e-12);
  T_EQ_INT(p("5 ns", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 5e-9, 1e-12);
  T_EQ_INT(p("1e-3 s", UNIT_TIME, &u), UNITS_OK);
  T_NEAR(u.value, 1e-3, 1e-12);
  T_EQ_INT(p("20 req/s", UNIT_RATE, &u), UNITS_OK);
  T_NEAR(u.value, 20, 1e-12);
  T_EQ_INT(p("600 req/min", UNIT_RATE, &u), UNITS_OK);
  T_NEAR(u.value, 10, 1e-12);
  T_EQ_INT(p("20 ms", UNIT_RATE, &u), UNITS_WRONG_KIND);
  T_EQ_INT(u.got, UNIT_TIME);
  T_EQ_INT(p("ms", UNIT_TIME, &u), UNITS_BAD_NUMBER);
  T_EQ_INT(p(".", UNIT_TIME, &u), UNITS_BAD_NUMBER);
  T_EQ_INT(p("", UNIT_TIME, &u), UNITS_BAD_NUMBER);
  T_EQ_INT(p("-5 ms", UNIT_TIME, &u), UNITS_NEGATIVE);
  T_EQ_INT(p("1e400 s", UNIT_TIME, &u), UNITS_OVERFLOW);
  T_EQ_INT(p("5 mss", UNIT_TIME, &u), UNITS_UNKNOWN_UNIT);
  T_EQ_STR(u.suggest, "ms");
}

static void test_tables(void) {
  T_EQ_STR(units_kind_name(UNIT_BANDWIDTH), "bandwidth");
  T_CHECK(strstr(units_accepted(UNIT_MEMORY), "GiB") != NULL);
  T_CHECK(strstr(units_accepted(UNIT_MEMORY), "Gb/s") == NULL);
  T_CHECK(strstr(units_accepted(UNIT_BANDWIDTH), "Gb/s") != NULL);
  T_EQ_STR(units_accepted(UNIT_RATE), "req/s, req/min");
  /* every example parses as its own kind */
  for (int k = 0; k < UNIT__COUNT; k++) {
    UnitValue u;
    T_EQ_INT(units_parse(units_example((UnitKind)k), (UnitKind)k, &u), UNITS_OK);
  }
}

int main(void) {
  T_RUN(test_memory);
  T_RUN(test_bandwidth);
  T_RUN(test_compute_time_rate);
  T_RUN(test_tables);
  T_DONE();
}
