// gpu_softmax.hpp: a softmax classifier trained on the GPU (gpu_softmax.cu), behind
// a plain interface so the CUDA compiler never sees manta's headers.
#pragma once

#include <string>
#include <vector>

/// Data and weights on the device; trains with full-batch gradient descent.
class gpu_softmax {
 public:
  /// @param x samples x dims features, row-major; @param y labels in [0, classes)
  /// @throws std::runtime_error on any CUDA error
  gpu_softmax(const std::vector<float>& x, const std::vector<int>& y, int dims, int classes);
  ~gpu_softmax();
  gpu_softmax(const gpu_softmax&) = delete;
  gpu_softmax& operator=(const gpu_softmax&) = delete;

  /// Runs `epochs` gradient steps; returns the training accuracy afterwards.
  double train(int epochs, float learning_rate);
  /// The device's name.
  static std::string device_name();

 private:
  int n_, dims_, classes_;
  float *x_ = nullptr, *w_ = nullptr, *delta_ = nullptr;
  int *y_ = nullptr, *correct_ = nullptr;
};
