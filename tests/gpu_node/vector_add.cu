// The smoke test's CUDA program, for checking the smoke test's command on a GPU node without NVIDIA's
// sample image: adds two vectors on the GPU, checks every element on the CPU, prints "Test PASSED" and
// exits 0, or says what failed and exits 1 (the smoke test decides passed/failed by the exit code).
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

__global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

static int check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) {
        fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(err));
        return 1;
    }
    return 0;
}

int main() {
    const int n = 50000;
    const size_t bytes = n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    for (int i = 0; i < n; ++i) { a[i] = rand() / (float)RAND_MAX; b[i] = rand() / (float)RAND_MAX; }
    float *da, *db, *dc;
    if (check(cudaMalloc(&da, bytes), "cudaMalloc") || check(cudaMalloc(&db, bytes), "cudaMalloc") ||
        check(cudaMalloc(&dc, bytes), "cudaMalloc")) return 1;
    if (check(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice), "copy to device") ||
        check(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice), "copy to device")) return 1;
    int threads = 256, blocks = (n + threads - 1) / threads;
    printf("[Vector addition of %d elements]\nCUDA kernel launch with %d blocks of %d threads\n", n, blocks, threads);
    add<<<blocks, threads>>>(da, db, dc, n);
    if (check(cudaGetLastError(), "kernel launch") || check(cudaDeviceSynchronize(), "kernel")) return 1;
    if (check(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost), "copy to host")) return 1;
    for (int i = 0; i < n; ++i) {
        if (fabsf(a[i] + b[i] - c[i]) > 1e-5f) { fprintf(stderr, "Result wrong at element %d\n", i); return 1; }
    }
    printf("Test PASSED\n");
    return 0;
}
