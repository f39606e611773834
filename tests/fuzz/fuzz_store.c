/*
 * fuzz_store.c: libFuzzer target for the rendezvous store's request frames
 * (rt_store_frame_decode in runtime/store.c). Anyone who can reach the
 * store's address can send it bytes, so the input is a client's whole byte
 * stream: it is decoded frame by frame, as the server does, until the bytes
 * run out (RT_FRAME_MORE) or a frame is refused (RT_FRAME_BAD: the server
 * would close the connection). No socket is involved.
 *
 * Every accepted frame is checked against the wire format in store.h and
 * encoded again, which must give back exactly the bytes it came from; each
 * strict prefix of it must decode as RT_FRAME_MORE, so a frame split across
 * reads is never refused or misread. The input is copied into a buffer of
 * its exact size, so a read past the end is caught.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "fuzz_store: `%s` does not hold\n", #c);             \
      abort();                                                              \
    }                                                                       \
  } while (0)

static uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Encodes f as a client does (store.c request()); returns the size. */
static size_t encode(const RtStoreFrame *f, unsigned char *out) {
  size_t len = 3 + f->klen + f->vlen;
  out[0] = (unsigned char)(len >> 24);
  out[1] = (unsigned char)(len >> 16);
  out[2] = (unsigned char)(len >> 8);
  out[3] = (unsigned char)len;
  out[4] = (unsigned char)f->op;
  out[5] = (unsigned char)(f->klen >> 8);
  out[6] = (unsigned char)f->klen;
  memcpy(out + 7, f->key, f->klen);
  if (f->vlen) memcpy(out + 7 + f->klen, f->val, f->vlen);
  return 4 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  if (size) memcpy(buf, data, size);
  unsigned char *again = malloc(size ? size : 1);
  if (!again) {
    free(buf);
    return 0;
  }
  size_t off = 0;
  for (;;) {
    RtStoreFrame f;
    size_t used = 0, left = size - off;
    RtFrameStatus st = rt_store_frame_decode(buf + off, left, &f, &used);
    if (st == RT_FRAME_MORE) {
      /* Only a missing header or a missing body is "more". */
      CHECK(left < 4 || (be32(buf + off) >= 3 && be32(buf + off) <= RT_STORE_MAX_FRAME &&
                         4 + (size_t)be32(buf + off) > left));
      break;
    }
    if (st == RT_FRAME_BAD) {
      CHECK(left >= 4);
      break;
    }
    CHECK(st == RT_FRAME_OK);
    CHECK(used >= 8 && used <= left && used - 4 <= RT_STORE_MAX_FRAME);
    CHECK(f.op >= RT_STORE_OP_SET && f.op <= RT_STORE_OP_ADD);
    CHECK(f.klen >= 1 && f.klen <= RT_STORE_MAX_KEY);
    CHECK((const unsigned char *)f.key == buf + off + 7);
    CHECK((const unsigned char *)f.val == buf + off + 7 + f.klen);
    CHECK(7 + f.klen + f.vlen == used);
    if (f.op == RT_STORE_OP_WAIT) CHECK(f.vlen == 4);
    if (f.op == RT_STORE_OP_ADD) CHECK(f.vlen == 8);
    CHECK(encode(&f, again) == used);
    CHECK(memcmp(again, buf + off, used) == 0);
    /* A frame cut anywhere is incomplete, never refused. */
    size_t cuts[] = {0, 3, 4, 7, used / 2, used - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
      RtStoreFrame g;
      size_t u = 0;
      if (cuts[i] < used) CHECK(rt_store_frame_decode(buf + off, cuts[i], &g, &u) == RT_FRAME_MORE);
    }
    off += used;
  }
  free(again);
  free(buf);
  return 0;
}
