// gpu_softmax.cu: the kernels of the gpu_actor sample. One thread per sample
// computes its softmax and error; one thread per weight sums its gradient.
#include "gpu_softmax.hpp"

#include <cuda_runtime.h>

#include <stdexcept>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

constexpr int max_classes = 16;

/// delta = softmax(x w) - onehot(y); counts correct predictions.
__global__ void forward(const float* x, const float* w, const int* y, float* delta, int* correct,
                        int n, int dims, int classes) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float logits[max_classes];
  float top = -1e30f;
  int best = 0;
  for (int c = 0; c < classes; ++c) {
    float s = 0;
    for (int d = 0; d < dims; ++d) s += x[i * dims + d] * w[d * classes + c];
    logits[c] = s;
    if (s > top) {
      top = s;
      best = c;
    }
  }
  float sum = 0;
  for (int c = 0; c < classes; ++c) sum += logits[c] = expf(logits[c] - top);
  for (int c = 0; c < classes; ++c) delta[i * classes + c] = logits[c] / sum - (c == y[i] ? 1.f : 0.f);
  if (best == y[i]) atomicAdd(correct, 1);
}

/// w -= rate * x^T delta / n
__global__ void update(const float* x, const float* delta, float* w, int n, int dims, int classes,
                       float rate) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= dims * classes) return;
  int d = k / classes, c = k % classes;
  float g = 0;
  for (int i = 0; i < n; ++i) g += x[i * dims + d] * delta[i * classes + c];
  w[k] -= rate * g / n;
}

}  // namespace

gpu_softmax::gpu_softmax(const std::vector<float>& x, const std::vector<int>& y, int dims, int classes)
    : n_(static_cast<int>(y.size())), dims_(dims), classes_(classes) {
  if (classes > max_classes) throw std::runtime_error("gpu_softmax: too many classes");
  check(cudaMalloc(&x_, x.size() * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&y_, y.size() * sizeof(int)), "cudaMalloc");
  check(cudaMalloc(&w_, dims * classes * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&delta_, static_cast<size_t>(n_) * classes * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&correct_, sizeof(int)), "cudaMalloc");
  check(cudaMemcpy(x_, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(y_, y.data(), y.size() * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemset(w_, 0, dims * classes * sizeof(float)), "cudaMemset");
}

gpu_softmax::~gpu_softmax() {
  for (void* p : {static_cast<void*>(x_), static_cast<void*>(y_), static_cast<void*>(w_),
                  static_cast<void*>(delta_), static_cast<void*>(correct_)})
    if (p) cudaFree(p);
}

double gpu_softmax::train(int epochs, float learning_rate) {
  int correct = 0;
  for (int e = 0; e <= epochs; ++e) {
    check(cudaMemset(correct_, 0, sizeof(int)), "cudaMemset");
    forward<<<(n_ + 255) / 256, 256>>>(x_, w_, y_, delta_, correct_, n_, dims_, classes_);
    check(cudaGetLastError(), "forward");
    if (e == epochs) break;  // the last pass only measures
    update<<<(dims_ * classes_ + 255) / 256, 256>>>(x_, delta_, w_, n_, dims_, classes_, learning_rate);
    check(cudaGetLastError(), "update");
  }
  check(cudaMemcpy(&correct, correct_, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return static_cast<double>(correct) / n_;
}

std::string gpu_softmax::device_name() {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  return p.name;
}
