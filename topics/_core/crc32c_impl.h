/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for topics._core._ext.
 *
 * Two implementations behind one entry point, chosen once at import time:
 *   - the SSE4.2 crc32 instruction on x86-64 CPUs that have it. The function carries
 *     __attribute__((target("sse4.2"))) so the extension builds without -msse4.2 and
 *     still runs on CPUs without SSE4.2 (it is only called after a runtime check);
 *   - portable slicing-by-8 tables everywhere else.
 *
 * topics_crc32c(crc, p, n) is chainable like zlib.crc32: it takes and returns the
 * finalised value, so crc32c(b, crc32c(a)) == crc32c(a + b). Every function here only
 * reads memory and is safe to call without the GIL once topics_crc32c_init() has run.
 */
#ifndef TOPICS_CRC32C_IMPL_H
#define TOPICS_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TOPICS_CRC32C_X86 1
#include <nmmintrin.h>
#endif

static uint32_t topics_crc32c_table[8][256];
static int topics_crc32c_use_hw = 0;

static void topics_crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        topics_crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = topics_crc32c_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = topics_crc32c_table[0][c & 0xFF] ^ (c >> 8);
            topics_crc32c_table[t][n] = c;
        }
    }
#ifdef TOPICS_CRC32C_X86
    __builtin_cpu_init();
    topics_crc32c_use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}

static inline uint32_t topics_crc32c_load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Raw (non-inverted) state in and out. */
static uint32_t topics_crc32c_sw_raw(uint32_t c, const unsigned char *p, size_t n) {
    const uint32_t (*t)[256] = topics_crc32c_table;
    while (n >= 8) {
        uint32_t lo = c ^ topics_crc32c_load_le32(p);
        uint32_t hi = topics_crc32c_load_le32(p + 4);
        c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
            t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#ifdef TOPICS_CRC32C_X86
__attribute__((target("sse4.2"))) static uint32_t topics_crc32c_hw_raw(uint32_t c, const unsigned char *p,
                                                                       size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* unaligned load; x86 is little-endian like the CRC's byte order */
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

/* Portable path only: lets the tests cover the tables on machines with SSE4.2. */
static uint32_t topics_crc32c_sw(uint32_t crc, const void *buf, size_t n) {
    return ~topics_crc32c_sw_raw(~crc, (const unsigned char *)buf, n);
}

static uint32_t topics_crc32c(uint32_t crc, const void *buf, size_t n) {
#ifdef TOPICS_CRC32C_X86
    if (topics_crc32c_use_hw) return ~topics_crc32c_hw_raw(~crc, (const unsigned char *)buf, n);
#endif
    return ~topics_crc32c_sw_raw(~crc, (const unsigned char *)buf, n);
}

static int topics_crc32c_hw_available(void) { return topics_crc32c_use_hw; }

#endif /* TOPICS_CRC32C_IMPL_H */
