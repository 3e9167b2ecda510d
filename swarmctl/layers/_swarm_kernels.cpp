// Fused element-wise kernels of one SWARM iteration on the CPU (loaded by swarmctl/layers/_ext.py).
//
// Plain C ABI on raw, contiguous row-major buffers: no torch headers, so the build takes about a
// second. Rows are entities (B * N of them); each row holds 4H gate values in the block order
// (in, f, o, g) and H state values. Rows are split over OpenMP threads.
//
// forward:  gates[r] = act(a[r] + b[r] + p[set(r)]);  c[r] = f * c_prev[r] + in * g;  h[r] = o * tanh(c[r])
// backward: given dh, dc of (h, c): overwrite gates[r] with da[r], write dc_prev[r] = dc' * f, and
//           optionally sum da over the rows of each set (the gradient of a per-set population term).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

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

template <typename T>
void forward(int64_t rows, int64_t H, const T* a, const T* b, T* gates, const T* p, int64_t rows_per_set,
             const T* c_prev, T* h, T* c, int nthreads) {
    const int64_t G = 4 * H;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const T* ar = a + r * G;
        T* gr = gates + r * G;
        const T* br = b ? b + r * G : nullptr;
        const T* pr = p ? p + (r / rows_per_set) * G : nullptr;
        const T* cp = c_prev ? c_prev + r * H : nullptr;
        T* hr = h + r * H;
        T* cr = c + r * H;
        if (br && pr) {
#pragma omp simd
            for (int64_t k = 0; k < G; ++k) gr[k] = ar[k] + br[k] + pr[k];
        } else if (br || pr) {
            const T* q = br ? br : pr;
#pragma omp simd
            for (int64_t k = 0; k < G; ++k) gr[k] = ar[k] + q[k];
        } else if (gr != ar) {
            std::memcpy(gr, ar, sizeof(T) * G);
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

template <typename T>
inline void backward_row(int64_t H, T* gr, const T* cp, const T* cn, const T* dh, const T* dc,
                         const T* dpool, T w, T* dcp) {
    T* gi = gr;
    T* gf = gr + H;
    T* go = gr + 2 * H;
    T* gg = gr + 3 * H;
#pragma omp simd
    for (int64_t k = 0; k < H; ++k) {
        T dhk = (dh ? dh[k] : T(0)) + (dpool ? w * dpool[k] : T(0));
        T tc = tanh_(cn[k]);
        T i = gi[k], f = gf[k], o = go[k], g = gg[k];
        T dct = (dc ? dc[k] : T(0)) + dhk * o * (T(1) - tc * tc);
        T c0 = cp ? cp[k] : T(0);
        gi[k] = dct * g * i * (T(1) - i);
        gf[k] = dct * c0 * f * (T(1) - f);
        go[k] = dhk * tc * o * (T(1) - o);
        gg[k] = dct * i * (T(1) - g * g);
        if (dcp) dcp[k] = dct * f;
    }
}

template <typename T>
void backward(int64_t rows, int64_t H, T* gates, const T* c_prev, const T* c_new, const T* dh,
              const T* dc, const T* dpool, const T* weights, int64_t rows_per_set, T* dc_prev, T* dp,
              int nthreads) {
    const int64_t G = 4 * H;
    auto row = [&](int64_t r) {
        T w = T(0);
        const T* dpr = nullptr;
        if (dpool) {
            dpr = dpool + (r / rows_per_set) * H;
            w = weights ? weights[r] : T(1) / T(rows_per_set);
        }
        backward_row<T>(H, gates + r * G, c_prev ? c_prev + r * H : nullptr, c_new + r * H,
                        dh ? dh + r * H : nullptr, dc ? dc + r * H : nullptr, dpr, w,
                        dc_prev ? dc_prev + r * H : nullptr);
    };
    if (!dp) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t r = 0; r < rows; ++r) row(r);
        return;
    }
    // With the per-set sum: each thread takes whole sets, so the sums need no atomics.
    const int64_t sets = rows / rows_per_set;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t s = 0; s < sets; ++s) {
        T* dps = dp + s * G;
        for (int64_t k = 0; k < G; ++k) dps[k] = T(0);
        for (int64_t r = s * rows_per_set; r < (s + 1) * rows_per_set; ++r) {
            row(r);
            const T* gr = gates + r * G;
#pragma omp simd
            for (int64_t k = 0; k < G; ++k) dps[k] += gr[k];
        }
    }
}

}  // namespace

extern "C" {

int swarm_abi_version() { return 2; }

void swarm_forward_f32(int64_t rows, int64_t H, const float* a, const float* b, float* gates, const float* p,
                       int64_t rows_per_set, const float* c_prev, float* h, float* c, int nthreads) {
    forward<float>(rows, H, a, b, gates, p, rows_per_set, c_prev, h, c, nthreads);
}
void swarm_forward_f64(int64_t rows, int64_t H, const double* a, const double* b, double* gates, const double* p,
                       int64_t rows_per_set, const double* c_prev, double* h, double* c, int nthreads) {
    forward<double>(rows, H, a, b, gates, p, rows_per_set, c_prev, h, c, nthreads);
}
void swarm_backward_f32(int64_t rows, int64_t H, float* gates, const float* c_prev, const float* c_new,
                        const float* dh, const float* dc, const float* dpool, const float* weights,
                        int64_t rows_per_set, float* dc_prev, float* dp, int nthreads) {
    backward<float>(rows, H, gates, c_prev, c_new, dh, dc, dpool, weights, rows_per_set, dc_prev, dp, nthreads);
}
void swarm_backward_f64(int64_t rows, int64_t H, double* gates, const double* c_prev, const double* c_new,
                        const double* dh, const double* dc, const double* dpool, const double* weights,
                        int64_t rows_per_set, double* dc_prev, double* dp, int nthreads) {
    backward<double>(rows, H, gates, c_prev, c_new, dh, dc, dpool, weights, rows_per_set, dc_prev, dp, nthreads);
}

}  // extern "C"
