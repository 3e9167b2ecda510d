// Fused element-wise kernels of one SWARM iteration on the CPU (loaded by swarmctl/layers/_ext.py).
//
// Plain C ABI on raw, contiguous row-major buffers: no torch headers, so the build takes about a
// second. Rows are entities (B * N of them); each row holds 4H gate values in the block order
// (in, f, o, g) and H state values. Rows are split over OpenMP threads.
//
// forward:  gates[r] = act(pre-activation of r);  c[r] = f * c_prev[r] + in * g;  h[r] = o * tanh(c[r])
// backward: given dh, dc of (h, c): overwrite gates[r] with da[r], write dc_prev[r] = dc' * f, and
//           optionally sum da over the rows of each set (the gradient of a per-set population term)
//           and accumulate the gradients of a narrow input projection computed in the forward.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

// exp for float: Cody-Waite range reduction and a degree-6 polynomial (about 2 ulp), written as
// straight-line code so that the compiler vectorises the loops that call it.
inline float exp_f(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = std::nearbyint(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
inline double exp_f(double x) { return std::exp(x); }

template <typename T> inline T sigmoid(T x) { return T(1) / (T(1) + exp_f(-x)); }
// tanh(x) = 2 sigmoid(2x) - 1, with the sign folded so that large |x| saturates exactly at +-1.
template <typename T> inline T tanh_(T x) {
    T e = exp_f(T(-2) * std::fabs(x));
    T t = (T(1) - e) / (T(1) + e);
    return std::copysign(t, x);
}
inline double tanh_(double x) { return std::tanh(x); }

// Forward of one iteration. The gate pre-activation of row r is the sum of the optional terms
//   a[r] (the recurrent product), b[r] (a cached input projection), bias + wxT^T x[r] (the input
//   projection computed here, for a narrow input of width D), p[set(r)] (the population term).
template <typename T>
void forward(int64_t rows, int64_t H, int64_t D, const T* a, const T* b, const T* x, const T* wxT,
             const T* bias, const T* p, int64_t rows_per_set, T* gates, const T* c_prev, T* h, T* c,
             int nthreads) {
    const int64_t G = 4 * H;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        T* gr = gates + r * G;
        const T* ar = a ? a + r * G : nullptr;
        const T* br = b ? b + r * G : nullptr;
        const T* pr = p ? p + (r / rows_per_set) * G : nullptr;
        const T* cp = c_prev ? c_prev + r * H : nullptr;
        T* hr = h + r * H;
        T* cr = c + r * H;
        if (ar) {
            if (ar != gr) std::memcpy(gr, ar, sizeof(T) * G);
        } else {
            for (int64_t k = 0; k < G; ++k) gr[k] = T(0);
        }
        if (br) {
#pragma omp simd
            for (int64_t k = 0; k < G; ++k) gr[k] += br[k];
        }
        if (bias) {
#pragma omp simd
            for (int64_t k = 0; k < G; ++k) gr[k] += bias[k];
        }
        if (x) {
            for (int64_t d = 0; d < D; ++d) {
                const T xd = x[r * D + d];
                const T* w = wxT + d * G;
#pragma omp simd
                for (int64_t k = 0; k < G; ++k) gr[k] += xd * w[k];
            }
        }
        if (pr) {
#pragma omp simd
            for (int64_t k = 0; k < G; ++k) gr[k] += pr[k];
        }
#pragma omp simd
        for (int64_t k = 0; k < 3 * H; ++k) gr[k] = sigmoid(gr[k]);
#pragma omp simd
        for (int64_t k = 3 * H; k < G; ++k) gr[k] = tanh_(gr[k]);
        const T* gi = gr;
        const T* gf = gr + H;
        const T* go = gr + 2 * H;
        const T* gg = gr + 3 * H;
        if (cp) {
#pragma omp simd
            for (int64_t k = 0; k < H; ++k) {
                T cn = gf[k] * cp[k] + gi[k] * gg[k];
                cr[k] = cn;
                hr[k] = go[k] * tanh_(cn);
            }
        } else {
#pragma omp simd
            for (int64_t k = 0; k < H; ++k) {
                T cn = gi[k] * gg[k];
                cr[k] = cn;
                hr[k] = go[k] * tanh_(cn);
            }
        }
    }
}

// backward_row where dh and dc are given, specialised on the pooled gradient and the previous state:
// without per-element tests on optional inputs the loop vectorises without masked loads (ten times faster).
template <typename T, bool POOL, bool PREV>
inline void backward_row_given(int64_t H, const T* gr, T* dar, const T* cp, const T* cn, const T* dh, const T* dc,
                               const T* dpool, T w, T* dcp) {
    const T* gi = gr;
    const T* gf = gr + H;
    const T* go = gr + 2 * H;
    const T* gg = gr + 3 * H;
#pragma omp simd
    for (int64_t k = 0; k < H; ++k) {
        T dhk = POOL ? dh[k] + w * dpool[k] : dh[k];
        T tc = tanh_(cn[k]);
        T i = gi[k], f = gf[k], o = go[k], g = gg[k];
        T dct = dc[k] + dhk * o * (T(1) - tc * tc);
        dar[k] = dct * g * i * (T(1) - i);
        T c0 = PREV ? cp[k] : T(0);
        dar[H + k] = dct * c0 * f * (T(1) - f);
        dar[2 * H + k] = dhk * tc * o * (T(1) - o);
        dar[3 * H + k] = dct * i * (T(1) - g * g);
        if (PREV) dcp[k] = dct * f;
    }
}

template <typename T>
inline void backward_row(int64_t H, const T* gr, T* dar, const T* cp, const T* cn, const T* dh, const T* dc,
                         const T* dpool, T w, T* dcp) {
    const T* gi = gr;
    const T* gf = gr + H;
    const T* go = gr + 2 * H;
    const T* gg = gr + 3 * H;
#pragma omp simd
    for (int64_t k = 0; k < H; ++k) {
        T dhk = (dh ? dh[k] : T(0)) + (dpool ? w * dpool[k] : T(0));
        T tc = tanh_(cn[k]);
        T i = gi[k], f = gf[k], o = go[k], g = gg[k];
        T dct = (dc ? dc[k] : T(0)) + dhk * o * (T(1) - tc * tc);
        T c0 = cp ? cp[k] : T(0);
        dar[k] = dct * g * i * (T(1) - i);
        dar[H + k] = dct * c0 * f * (T(1) - f);
        dar[2 * H + k] = dhk * tc * o * (T(1) - o);
        dar[3 * H + k] = dct * i * (T(1) - g * g);
        if (dcp) dcp[k] = dct * f;
    }
}

// Backward of one iteration: from the activated gates, the gate gradient da (may be gates itself).
//   dh, dc: gradients of this iteration's h and c (row strides ld_dh, ld_dc; either may be null);
//   dpool (sets x H) adds weights[r] * dpool[set(r)] to dh (mean pooling; weights null = 1/rows_per_set);
//   dc_prev (out): gradient of the previous c; dp (out, sets x G): sum of da over each set's rows;
//   with x (narrow input of width D): dwxT (D x G) and db (G) accumulate x[r] da[r] and da[r], and
//   dx (rows x D, if not null) accumulates wxT da[r].
template <typename T>
void backward(int64_t rows, int64_t H, int64_t D, const T* gates, T* da, const T* c_prev, const T* c_new, const T* dh,
              int64_t ld_dh, const T* dc, int64_t ld_dc, const T* dpool, const T* weights,
              int64_t rows_per_set, T* dc_prev, T* dp, const T* x, const T* wxT, T* dwxT, T* db, T* dx,
              int nthreads) {
    const int64_t G = 4 * H;
    const int64_t sets = rows_per_set > 0 ? rows / rows_per_set : 0;
    // Whole sets per thread where per-set sums are needed (no atomics), rows otherwise.
    const bool by_set = dp != nullptr;
    const int64_t units = by_set ? sets : rows;
    // Per-thread partial sums of dwxT and db, added in thread order afterwards: deterministic results.
    const int64_t width = x ? (D + 1) * G : 0;
    std::vector<T> partial(static_cast<size_t>(width) * (nthreads > 0 ? nthreads : 1), T(0));
#pragma omp parallel num_threads(nthreads)
    {
#ifdef _OPENMP
        T* acc = partial.data() + width * omp_get_thread_num();
#else
        T* acc = partial.data();
#endif
#pragma omp for schedule(static)
        for (int64_t u = 0; u < units; ++u) {
            const int64_t r0 = by_set ? u * rows_per_set : u;
            const int64_t r1 = by_set ? r0 + rows_per_set : u + 1;
            T* dps = by_set ? dp + u * G : nullptr;
            if (dps)
                for (int64_t k = 0; k < G; ++k) dps[k] = T(0);
            for (int64_t r = r0; r < r1; ++r) {
                const T* gr = gates + r * G;
                T* dar = da + r * G;
                T w = T(0);
                const T* dpr = nullptr;
                if (dpool) {
                    dpr = dpool + (r / rows_per_set) * H;
                    w = weights ? weights[r] : T(1) / T(rows_per_set);
                }
                const T* cp = c_prev ? c_prev + r * H : nullptr;
                T* dcp = dc_prev ? dc_prev + r * H : nullptr;
                if (dh && dc && (cp != nullptr) == (dcp != nullptr)) {
                    const T* dhr = dh + r * ld_dh;
                    const T* dcr = dc + r * ld_dc;
                    if (dpr && cp)
                        backward_row_given<T, true, true>(H, gr, dar, cp, c_new + r * H, dhr, dcr, dpr, w, dcp);
                    else if (dpr)
                        backward_row_given<T, true, false>(H, gr, dar, cp, c_new + r * H, dhr, dcr, dpr, w, dcp);
                    else if (cp)
                        backward_row_given<T, false, true>(H, gr, dar, cp, c_new + r * H, dhr, dcr, dpr, w, dcp);
                    else
                        backward_row_given<T, false, false>(H, gr, dar, cp, c_new + r * H, dhr, dcr, dpr, w, dcp);
                } else {
                    backward_row<T>(H, gr, dar, cp, c_new + r * H, dh ? dh + r * ld_dh : nullptr,
                                    dc ? dc + r * ld_dc : nullptr, dpr, w, dcp);
                }
                if (dps) {
#pragma omp simd
                    for (int64_t k = 0; k < G; ++k) dps[k] += dar[k];
                }
                if (x) {
                    T* adb = acc + D * G;
#pragma omp simd
                    for (int64_t k = 0; k < G; ++k) adb[k] += dar[k];
                    for (int64_t d = 0; d < D; ++d) {
                        const T xd = x[r * D + d];
                        T* aw = acc + d * G;
                        const T* wd = wxT + d * G;
                        T s = T(0);
#pragma omp simd reduction(+ : s)
                        for (int64_t k = 0; k < G; ++k) {
                            aw[k] += xd * dar[k];
                            s += wd[k] * dar[k];
                        }
                        if (dx) dx[r * D + d] += s;
                    }
                }
            }
        }
    }
    if (x) {
        for (int th = 0; th < (nthreads > 0 ? nthreads : 1); ++th) {
            const T* acc = partial.data() + width * th;
            for (int64_t k = 0; k < D * G; ++k) dwxT[k] += acc[k];
            for (int64_t k = 0; k < G; ++k) db[k] += acc[D * G + k];
        }
    }
}

}  // namespace

extern "C" {

int swarm_abi_version() { return 4; }

#define SWARM_EXPORT(T, SUF)                                                                              \
    void swarm_forward_##SUF(int64_t rows, int64_t H, int64_t D, const T* a, const T* b, const T* x,        \
                             const T* wxT, const T* bias, const T* p, int64_t rows_per_set, T* gates,      \
                             const T* c_prev, T* h, T* c, int nthreads) {                                 \
        forward<T>(rows, H, D, a, b, x, wxT, bias, p, rows_per_set, gates, c_prev, h, c, nthreads);      \
    }                                                                                                     \
    void swarm_backward_##SUF(int64_t rows, int64_t H, int64_t D, const T* gates, T* da, const T* c_prev,  \
                              const T* c_new, const T* dh, int64_t ld_dh, const T* dc, int64_t ld_dc,      \
                              const T* dpool, const T* weights, int64_t rows_per_set, T* dc_prev, T* dp,   \
                              const T* x, const T* wxT, T* dwxT, T* db, T* dx, int nthreads) {            \
        backward<T>(rows, H, D, gates, da, c_prev, c_new, dh, ld_dh, dc, ld_dc, dpool, weights, rows_per_set,  \
                    dc_prev, dp, x, wxT, dwxT, db, dx, nthreads);                                         \
    }

SWARM_EXPORT(float, f32)
SWARM_EXPORT(double, f64)

}  // extern "C"
