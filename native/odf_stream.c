/*
 * Stream assembly for the arrow-digest V0 logical hash (coordinator/data/hashing.py).
 *
 * The Python side computes the null mask and the Arrow buffer pointers; these loops only copy
 * bytes into a caller-provided buffer so hashlib's sha3 can consume it. Each function returns
 * the number of bytes written. No allocation, no Python API: loaded with ctypes.
 *
 * Built by `make setup` (cc -O2 -shared -fPIC); when absent the numpy path is used, and both
 * must produce byte-identical streams (tests/unit/test_logical_hash_native.py).
 */
#include <stdint.h>
#include <string.h>

/*
 * Variable-size rows: per row `u64 LE prefix || body[offsets[i]-offsets[0] .. offsets[i+1]-offsets[0]]`,
 * or one 0x00 byte for a null row. `null` is one byte per row (non-zero = null) or NULL for none;
 * `offsets` has n + 1 entries, int64 when `off64` else int32; `prefix` (n entries, int64) or NULL
 * for the body lengths; `body_len` = offsets[n] - offsets[0]. `out` must hold at least
 * 8 * n + body_len + 16 bytes.
 * Assumes a little-endian host (as the numpy path's int64 view does).
 */
int64_t odf_prefixed(const uint8_t *null, const void *offsets, int off64, int64_t n,
                     const uint8_t *body, int64_t body_len, const int64_t *prefix, uint8_t *out)
{
    const int32_t *o32 = (const int32_t *)offsets;
    const int64_t *o64 = (const int64_t *)offsets;
    int64_t base = off64 ? o64[0] : (int64_t)o32[0];
    uint8_t *w = out;
    int64_t lo = base;
    for (int64_t i = 0; i < n; i++) {
        int64_t hi = off64 ? o64[i + 1] : (int64_t)o32[i + 1];
        if (null && null[i]) {
            *w++ = 0;
        } else {
            int64_t len = hi - lo;
            int64_t p = prefix ? prefix[i] : len;
            memcpy(w, &p, 8);
            w += 8;
            const uint8_t *src = body + (lo - base);
            if (len <= 16 && (lo - base) + 16 <= body_len) {
                /* short value (the common case): a fixed 16-byte copy is two moves, where a
                 * variable-size memcpy call costs several nanoseconds; the caller leaves 16
                 * bytes of slack after the stream for the over-write */
                memcpy(w, src, 16);
            } else {
                memcpy(w, src, (size_t)len);
            }
            w += len;
        }
        lo = hi;
    }
    return (int64_t)(w - out);
}

/*
 * Fixed-width rows with nulls: the `width`-byte value per valid row, one 0x00 byte per null
 * row. `out` must hold n * width bytes.
 */
int64_t odf_fixed(const uint8_t *values, int64_t width, const uint8_t *null, int64_t n,
                  uint8_t *out)
{
    uint8_t *w = out;
    int64_t i = 0;
    while (i < n) {
        /* copy a run of valid rows in one memcpy */
        int64_t j = i;
        while (j < n && !null[j])
            j++;
        if (j > i) {
            size_t bytes = (size_t)((j - i) * width);
            memcpy(w, values + i * width, bytes);
            w += bytes;
        }
        while (j < n && null[j]) {
            *w++ = 0;
            j++;
        }
        i = j;
    }
    return (int64_t)(w - out);
}
