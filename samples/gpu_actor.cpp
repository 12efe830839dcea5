// gpu_actor: an actor holding a GPU. It asks for num_gpus(1); manta grants it a
// device id, sets CUDA_VISIBLE_DEVICES in the actor's process before its
// constructor runs, and keeps the GPU for the actor's life. The actor trains a
// softmax classifier on synthetic data with CUDA kernels (gpu_softmax.cu).
// On a node without a GPU it says so and exits successfully.
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <manta/manta.hpp>

#include "gpu_softmax.hpp"

class Trainer {
 public:
  Trainer(int samples, int dims, int classes, int seed) {
    // Gaussian blobs, one per class, around random centres.
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    std::normal_distribution<float> normal;
    std::vector<std::vector<float>> centres(classes, std::vector<float>(dims));
    for (auto& c : centres)
      for (auto& v : c) v = 3 * normal(rng);
    std::vector<float> x;
    std::vector<int> y;
    for (int i = 0; i < samples; ++i) {
      int label = i % classes;
      for (int d = 0; d < dims; ++d) x.push_back(centres[label][d] + normal(rng));
      y.push_back(label);
    }
    model_ = std::make_unique<gpu_softmax>(x, y, dims, classes);
  }
  /// Trains; returns (accuracy, the device's name, the GPU ids manta granted).
  std::tuple<double, std::string, std::vector<int>> train(int epochs) {
    return {model_->train(epochs, 0.1f), gpu_softmax::device_name(), manta::gpu_ids()};
  }

 private:
  std::unique_ptr<gpu_softmax> model_;
};
MANTA_ACTOR(Trainer, &Trainer::train);

int main() {
  manta::init();
  const double gpus = manta::cluster_resources()["GPU"];
  if (gpus < 1) {
    std::printf("gpu_actor: this node has no GPU (0 detected); skipped\n");
    manta::shutdown();
    return 0;
  }
  auto trainer = manta::actor<Trainer>().num_gpus(1).remote(20000, 32, 10, 7);
  auto [before, device, ids] = manta::get(trainer.task(&Trainer::train).remote(0));
  auto [after, device2, ids2] = manta::get(trainer.task(&Trainer::train).remote(200));
  std::printf("gpu_actor: trained on %s (GPU id %d of %.0f)\n", device.c_str(), ids.empty() ? -1 : ids[0], gpus);
  std::printf("accuracy before: %.3f, after 200 epochs: %.3f\n", before, after);
  std::printf("learned: %s\n", after > 0.9 && after > before ? "yes" : "no");
  manta::shutdown();
  return after > 0.9 ? 0 : 1;
}
