// AMX probe: does this CPU and kernel grant Intel AMX (tiles) to a process that asks,
// and how fast do the 512-bit VNNI and the AMX int8 products run on one core here?
//
//   gcc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mamx-tile -mamx-int8
//       scripts/amx_probe.c -o /tmp/amx_probe && /tmp/amx_probe   (one command line)
//
// It prints the core's clock (from a chain of dependent multiplies, 3 cycles each), the
// throughput of `vpdpbusd` on 512-bit vectors (what the native engine's quantized products
// are bound by on AVX-512 machines), whether `arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA)` succeeds, and if so the throughput of `tdpbusd` on full tiles and on
// the tiles a 32-value block product would use (16 weight rows x 32 values against 1 to 16
// tokens, one zeroed result tile per block, as a kernel that keeps every block's integer sum
// apart would). A CPU without AMX stops after the VNNI figures; one without AVX-512 VNNI
// must not run it at all (check /proc/cpuinfo for avx512_vnni and amx_int8 first).
//
// A measuring tool for docs/performance.md, not part of the build.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// The tile configuration of palette 1 (64 bytes, as LDTILECFG reads it).
typedef struct {
  uint8_t palette, start, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg;

static uint8_t weights[16 * 8960] __attribute__((aligned(64)));
static int8_t acts[16 * 8960] __attribute__((aligned(64)));
static int32_t sums[2][256] __attribute__((aligned(64)));

int main(void) {
  long x = 3, n = 300000000;
  double t0 = now();
  __asm__ volatile("mov %1, %%rcx\n1:\n imul %0,%0\n imul %0,%0\n imul %0,%0\n imul %0,%0\n dec %%rcx\n jnz 1b\n"
                   : "+r"(x) : "r"(n / 4) : "rcx");
  double ghz = 3.0 * n / (now() - t0) / 1e9;
  printf("clock: %.2f GHz (dependent imul chain)\n", ghz);

  __m512i acc[12];
  for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
  __m512i w = _mm512_set1_epi8(1), v = _mm512_set1_epi8(2);
  long m = 200000000;
  t0 = now();
  for (long i = 0; i < m; i++) {
#pragma GCC unroll 12
    for (int k = 0; k < 12; k++) __asm__ volatile("vpdpbusd %1, %2, %0" : "+v"(acc[k]) : "v"(w), "v"(v));
  }
  double t = now() - t0;
  printf("vpdpbusd zmm: %.2f G/s = %.2f per cycle = %.0f G multiply-adds/s (12 independent chains)\n",
         m * 12 / t / 1e9, m * 12 / t / 1e9 / ghz, m * 12 * 64 / t / 1e9);

  long perm = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
  printf("arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %ld\n", perm);
  if (perm != 0) {
    printf("AMX tile data not granted: no AMX figures\n");
    return 0;
  }

  tilecfg c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = 16;
  _tile_loadconfig(&c);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, weights, 64);
  _tile_loadd(5, weights + 1024, 64);
  _tile_loadd(6, acts, 64);
  _tile_loadd(7, acts + 1024, 64);
  long reps = 20000000;
  t0 = now();
  for (long i = 0; i < reps; i++) {
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  t = now() - t0;
  printf("tdpbusd, full tiles in registers: %.0f M/s = %.0f G multiply-adds/s\n", 4 * reps / t / 1e6,
         4 * reps * 16384.0 / t / 1e9);
  _tile_release();

  // Result tile: 16 weight rows x N tokens; weights 16 rows x 32 values (one block of
  // each row, rows 8960 values apart); activations in the layout tdpbusd takes (8 rows
  // of N tokens x 4 values).
  for (int tokens = 1; tokens <= 16; tokens *= 2) {
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 2; i++) c.colsb[i] = 4 * tokens, c.rows[i] = 16;
    for (int i = 4; i < 6; i++) c.colsb[i] = 32, c.rows[i] = 16;
    for (int i = 6; i < 8; i++) c.colsb[i] = 4 * tokens, c.rows[i] = 8;
    _tile_loadconfig(&c);
    int blocks = 8960 / 32;
    long passes = 2000;
    t0 = now();
    for (long r = 0; r < passes; r++) {
      for (int b = 0; b < blocks; b += 2) {
        _tile_loadd(4, weights + 32 * b, 8960);
        _tile_loadd(6, acts + b * 32 * tokens, 4 * tokens);
        _tile_zero(0);
        _tile_dpbusd(0, 4, 6);
        _tile_stored(0, sums[0], 4 * tokens);
        _tile_loadd(5, weights + 32 * (b + 1), 8960);
        _tile_loadd(7, acts + (b + 1) * 32 * tokens, 4 * tokens);
        _tile_zero(1);
        _tile_dpbusd(1, 5, 7);
        _tile_stored(1, sums[1], 4 * tokens);
      }
    }
    t = now() - t0;
    double n16 = (double)passes * blocks;
    printf("block tiles, %2d tokens: %.1f ns per 16 rows x 32 values, %.0f G multiply-adds/s\n", tokens,
           t / n16 * 1e9, n16 * 16 * 32 * tokens / t / 1e9);
    _tile_release();
  }
  return 0;
}
