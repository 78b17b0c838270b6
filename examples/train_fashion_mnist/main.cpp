// Trains an MLP or a small CNN on Fashion-MNIST with a filter_jit'd Adam step
// (cosine learning-rate decay), shuffled minibatches from kiln's PRNG, a progress
// bar, per-epoch test accuracy, a checkpoint after every epoch (--resume goes on
// from it and ends where an uninterrupted run ends) and an SVG plot of the curves.
//
//   build/examples/train_fashion_mnist                 # MLP, default device
//   build/examples/train_fashion_mnist --model cnn --epochs 3 --device vulkan
//   build/examples/train_fashion_mnist --processes 2    # data parallel (kiln::dist)
//
// Data parallel: each rank (a process; --processes N starts N on this machine, or
// a launcher sets KILN_RANK / KILN_WORLD_SIZE / KILN_DIST_*) trains on its share
// of every global batch; the gradients are averaged with dist::Group between a
// jitted gradient step and a jitted update, so every rank holds the same model.
// Rank 0 prints, writes the checkpoint, the plot and the JSON.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <kiln/dist/dist.hpp>
#include <kiln/dist/launch.hpp>
#include <kiln/kiln.hpp>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "fashion_mnist.hpp"
#include "models.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "shuffle.hpp"

namespace {

using namespace kiln;

struct Config {
  std::string model = "mlp";
  int epochs = 0;  // 0: the model's default
  std::int64_t batch_size = 128;
  std::string device;
  std::uint32_t seed = 0;
  double learning_rate = 1e-3;
  std::string data = fmnist::kDefaultDir;
  std::string checkpoint;  // "": fashion_mnist_<model>_<device>_<epochs>ep.npz
  bool resume = false;
  bool no_checkpoint = false;
  std::string plot;  // "": fashion_mnist_<model>_<device>_<epochs>ep.svg
  bool no_plot = false;
  std::string json;
  std::int64_t train_limit = 0;
  std::int64_t test_limit = 0;
  int stop_after = 0;
  int processes = 1;
  std::string precision = "f32";
};

// --precision: the dtype of the forward and backward pass. The weights and the
// optimizer state stay f32 (master weights); below f32 the loss is scaled
// dynamically (optim::DynamicLossScale) and a step whose gradients overflow is
// skipped (optim::apply_if_finite). Another dtype is one more entry here.
const std::map<std::string, DType>& precisions() {
  static const std::map<std::string, DType> table{{"f32", f32}, {"f16", f16}, {"bf16", bf16}};
  return table;
}

// The settings a run's results depend on: a static leaf of the checkpoint, so
// resuming with other settings is refused, naming them.
struct RunSettings {
  std::int64_t epochs = 0, batch_size = 0, train_examples = 0;
  std::uint32_t seed = 0;
  std::string precision;
  friend bool operator==(const RunSettings&, const RunSettings&) = default;
  template <class H>
  friend H AbslHashValue(H h, const RunSettings& r) {
    return H::combine(std::move(h), r.epochs, r.batch_size, r.train_examples, r.seed, r.precision);
  }
  friend std::ostream& operator<<(std::ostream& os, const RunSettings& r) {
    return os << "--epochs " << r.epochs << " --batch-size " << r.batch_size << " --seed " << r.seed
              << " --train-limit " << r.train_examples << " --precision " << r.precision;
  }
};

// Everything a checkpoint holds: enough to continue exactly where a run stopped.
// "fashion_mnist_mlp_vulkan0_10ep": the default name of a run's files.
std::string default_stem(std::string_view model, const std::string& device, int epochs) {
  std::string dev;
  for (char c : device) {
    if (std::isalnum(static_cast<unsigned char>(c))) dev += c;
  }
  return "fashion_mnist_" + std::string(model) + "_" + dev + "_" + std::to_string(epochs) + "ep";
}

template <class M>
struct TrainState {
  M model;
  optim::State opt_state;
  Array epochs_done;  // i32 ()
  Array history;      // f32 (epochs, 2): training loss, test accuracy (NaN: not yet)
  RunSettings run;
  std::optional<optim::DynamicLossScale> loss_scale;  // below f32 only
  KILN_MODULE(TrainState, model, opt_state, epochs_done, history, run, loss_scale);
};

struct EpochResult {
  int epoch;
  double train_seconds, train_loss, test_accuracy;
  std::int64_t steps;
};

template <class M>
Array loss_fn(const M& model, const Array& x, const Array& y) {
  return mean(nn::softmax_cross_entropy_with_integer_labels(model(x), y));
}

// f32 logits of the model run in `dtype`: a cast copy of the f32 weights, so
// the gradient flows back to them through the casts.
template <class M>
Array logits_in(DType dtype, const M& model, const Array& x) {
  if (dtype == f32) return model(x);
  const M low = tree::map(
      [dtype](const Array& a) { return is_inexact(a.dtype()) ? astype(a, dtype) : a; }, model);
  return astype(low(astype(x, dtype)), f32);
}

// The key for everything random in a run, split once: initialisation, shuffling.
std::pair<Array, Array> run_keys(std::uint32_t seed) {
  const Array keys = random::split(random::key(seed), 2);
  return {reshape(slice_axis(keys, 0, 0, 1), {2}), reshape(slice_axis(keys, 0, 1, 2), {2})};
}

void write_json(const std::string& path, const Config& cfg, const std::string& device,
                const std::vector<EpochResult>& epochs, int trace_count) {
  std::ofstream f(path);
  f << std::setprecision(9) << "{\"model\":\"" << cfg.model << "\",\"precision\":\""
    << cfg.precision << "\",\"device\":\"" << device << "\",\"batch_size\":" << cfg.batch_size
    << ",\"trace_count\":" << trace_count << ",\"epochs\":[";
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    const auto& e = epochs[i];
    f << (i ? "," : "") << "{\"epoch\":" << e.epoch << ",\"train_seconds\":" << e.train_seconds
      << ",\"steps\":" << e.steps << ",\"train_loss\":" << e.train_loss
      << ",\"test_accuracy\":" << e.test_accuracy << "}";
  }
  f << "]}\n";
  if (!f.flush()) throw ValueError("[json] cannot write " + path);
}

template <class M>
int train(const Config& cfg, fmnist::Dataset& data, const dist::Group& group) {
  const int rank = group.rank(), world = group.world_size();
  static std::ostream null_stream(nullptr);  // ranks other than 0 print nothing
  std::ostream& out = rank == 0 ? std::cout : null_stream;
  const std::int64_t n_train = data.train.size(), n_test = data.test.size();
  const std::int64_t steps_per_epoch = n_train / cfg.batch_size;
  if (steps_per_epoch == 0) {
    throw ValueError("[train] --batch-size " + std::to_string(cfg.batch_size) +
                     " is larger than the " + std::to_string(n_train) + " training examples");
  }
  if (cfg.batch_size % world != 0) {
    throw ValueError("[train] --batch-size " + std::to_string(cfg.batch_size) +
                     " does not split evenly across " + std::to_string(world) + " processes");
  }
  const std::int64_t local_batch = cfg.batch_size / world;
  const std::int64_t total_steps = steps_per_epoch * cfg.epochs;
  const DType dtype = precisions().at(cfg.precision);
  const bool mixed = dtype != f32;
  if (mixed && world > 1) {
    throw ValueError("[train] --precision " + cfg.precision + " runs in one process only");
  }
  const auto adam = optim::adam(optim::cosine_decay_schedule(cfg.learning_rate, total_steps));
  // Up to 100 overflowing steps in a row are skipped while the loss scale adapts.
  const auto opt = mixed ? optim::apply_if_finite(adam, 100) : adam;
  std::ostringstream device_name;
  device_name << default_device();
  const std::string device = device_name.str();
  // Default file names say what produced them (model, device, epochs), so runs
  // with other settings do not overwrite each other's files.
  const std::string stem = default_stem(M::kName, device, cfg.epochs);
  const std::string ckpt = cfg.no_checkpoint            ? ""
                           : !cfg.checkpoint.empty() ? cfg.checkpoint
                                                     : stem + ".npz";
  out << "kiln: training the " << M::kName << " on Fashion-MNIST (" << n_train
            << " train / " << n_test << " test images) on " << device << "\n  "
            << cfg.epochs << " epochs of " << steps_per_epoch << " steps, batch "
            << cfg.batch_size << ", Adam with cosine decay from " << cfg.learning_rate
            << ", seed " << cfg.seed << "\n";
  if (mixed) {
    out << "  mixed precision: " << cfg.precision
        << " forward and backward, f32 master weights, dynamic loss scale from 2^15\n";
  }
  if (world > 1) {
    out << "  data parallel: " << world << " processes, " << local_batch
        << " images each per step, gradients averaged with kiln::dist (Gloo)\n";
  }

  const auto [init_key, shuffle_key] = run_keys(cfg.seed);
  TrainState<M> st;
  st.model = M::init(init_key);
  st.opt_state = opt.init(optim::gradient_template(st.model));
  st.epochs_done = array<std::int32_t>({0}, {});
  st.history = full({cfg.epochs, 2}, std::numeric_limits<double>::quiet_NaN());
  st.run = {cfg.epochs, cfg.batch_size, n_train, cfg.seed, cfg.precision};
  if (mixed) st.loss_scale = optim::DynamicLossScale(32768.0);
  if (cfg.resume) {
    if (ckpt.empty()) throw ValueError("[resume] --resume needs a checkpoint (not --no-checkpoint)");
    if (!std::filesystem::exists(ckpt)) {
      throw ValueError("[resume] no checkpoint at " + ckpt + " (run without --resume first)");
    }
    try {
      st = load_checkpoint(ckpt, st);
    } catch (const TreeError& e) {
      throw ValueError("[resume] " + ckpt + " does not fit this run (resume with the flags " +
                       "it was written with, and the same --model):\n" + e.what());
    }
    out << "  resumed from " << ckpt << " after epoch " << st.epochs_done.template item<std::int32_t>()
              << "\n";
  }

  // Every rank starts from rank 0's state (equal anyway for one seed; a launcher
  // could start ranks with different seeds or checkpoints).
  st.model = group.broadcast(st.model);
  st.opt_state = group.broadcast(st.opt_state);

  auto step = filter_jit(
      [opt](const M& m, const optim::State& s, const Array& x, const Array& y) {
        auto [loss, grads] = value_and_grad(loss_fn<M>)(m, x, y);
        auto [updates, next] = opt.update(grads, s, m);
        return std::tuple{optim::apply_updates(m, updates), next, loss};
      },
      {.name = "train_step", .arg_names = {"model", "opt_state", "x", "y"}});
  // The mixed-precision step (tests/test_mixed_precision.cpp's recipe).
  auto mixed_step = filter_jit(
      [opt, dtype](const M& m, const optim::State& s, const optim::DynamicLossScale& ls,
                   const Array& x, const Array& y) {
        auto scaled_loss = [dtype](const M& mm, const Array& xx, const Array& yy,
                                   const optim::DynamicLossScale& scale) {
          return scale.scale(
              mean(nn::softmax_cross_entropy_with_integer_labels(logits_in(dtype, mm, xx), yy)));
        };
        auto [scaled, g] = value_and_grad(scaled_loss)(m, x, y, ls);
        g = ls.unscale(g);
        const Array finite = optim::all_finite(g);
        auto [updates, next] = opt.update(g, s, m);
        return std::tuple{optim::apply_updates(m, updates), next, ls.adjust(finite),
                          ls.unscale(scaled)};
      },
      {.name = "train_step", .arg_names = {"model", "opt_state", "loss_scale", "x", "y"}});
  auto correct = filter_jit(
      [dtype](const M& m, const Array& x, const Array& y) {
        return sum(astype(argmax(logits_in(dtype, m, x), 1) == y, i32));
      },
      {.name = "evaluate", .arg_names = {"model", "x", "y"}});
  // Data parallel, the step in two: the gradient of this rank's share, the mean
  // over ranks (dist), the update.
  auto grad_step = filter_jit(
      [](const M& m, const Array& x, const Array& y) {
        return value_and_grad(loss_fn<M>)(m, x, y);
      },
      {.name = "grad_step", .arg_names = {"model", "x", "y"}});
  auto update_step = filter_jit(
      [opt](const M& m, const optim::State& s, const M& grads) {
        auto [updates, next] = opt.update(grads, s, m);
        return std::pair{optim::apply_updates(m, updates), next};
      },
      {.name = "update_step", .arg_names = {"model", "opt_state", "grads"}});
  auto train_on = [&](const Array& x, const Array& y) {
    Array loss;
    if (mixed) {
      std::tie(st.model, st.opt_state, *st.loss_scale, loss) =
          mixed_step(std::move(st.model), std::move(st.opt_state), *st.loss_scale, x, y);
      return loss;
    }
    if (world == 1) {
      std::tie(st.model, st.opt_state, loss) =
          step(std::move(st.model), std::move(st.opt_state), x, y);
      return loss;
    }
    auto [local_loss, grads] = grad_step(st.model, x, y);
    std::tie(loss, grads) = group.all_reduce_mean(std::pair{local_loss, grads});
    std::tie(st.model, st.opt_state) =
        update_step(std::move(st.model), std::move(st.opt_state), grads);
    return loss;
  };

  std::vector<float> history = st.history.template to_vector<float>();
  std::vector<EpochResult> results;
  const int first = st.epochs_done.template item<std::int32_t>();
  const int last = cfg.stop_after > 0 ? std::min(cfg.epochs, first + cfg.stop_after) : cfg.epochs;
  for (int epoch = first; epoch < last; ++epoch) {
    const std::vector<std::int32_t> order =
        fmnist::permutation(random::fold_in(shuffle_key, static_cast<std::uint32_t>(epoch)), n_train);
    std::ostringstream label;
    label << "epoch " << epoch + 1 << "/" << cfg.epochs;
    fmnist::Progress bar(out, label.str(), steps_per_epoch);
    double loss_sum = 0;
    Array pending;  // the previous step's loss, read after the next step is queued
    for (std::int64_t s = 0; s < steps_per_epoch; ++s) {
      auto [x, y] = fmnist::gather(
          data.train,
          std::span(order).subspan(static_cast<std::size_t>(s * cfg.batch_size + rank * local_batch),
                                   static_cast<std::size_t>(local_batch)));
      Array loss = train_on(x, y);
      if (!pending.is_null()) {
        loss_sum += pending.item<float>();
        bar.update(s, loss_sum / static_cast<double>(s));
      }
      pending = loss;
    }
    loss_sum += pending.item<float>();
    const double train_loss = loss_sum / static_cast<double>(steps_per_epoch);
    const double seconds = bar.finish(train_loss);

    const std::int64_t eval_batch = std::min<std::int64_t>(1000, n_test);
    std::int64_t right = 0;
    for (std::int64_t b = rank * eval_batch; b < n_test; b += world * eval_batch) {
      auto [x, y] = fmnist::slice(data.test, b, std::min(n_test, b + eval_batch));
      right += correct(st.model, x, y).template item<std::int32_t>();
    }
    if (world > 1) {  // each rank evaluated its share of the batches: sum the counts
      const Array mean_right = group.all_reduce_mean(array<float>({float(right)}, {}));
      right = std::llround(double(mean_right.item<float>()) * world);
    }
    const double accuracy = static_cast<double>(right) / static_cast<double>(n_test);
    out << "  train loss " << std::fixed << std::setprecision(4) << train_loss
              << ", test accuracy " << std::setprecision(2) << 100 * accuracy << "%\n"
              << std::defaultfloat;
    results.push_back({epoch + 1, seconds, train_loss, accuracy, steps_per_epoch});
    history[static_cast<std::size_t>(2 * epoch)] = static_cast<float>(train_loss);
    history[static_cast<std::size_t>(2 * epoch + 1)] = static_cast<float>(accuracy);
    st.history = array<float>(history, {cfg.epochs, 2});
    st.epochs_done = array<std::int32_t>({epoch + 1}, {});
    if (!ckpt.empty() && rank == 0) save_checkpoint(ckpt, st);
  }

  const int traces = mixed        ? mixed_step.trace_count()
                     : world == 1 ? step.trace_count()
                                  : grad_step.trace_count();
  if (mixed) {
    out << "final loss scale " << std::setprecision(6)
        << st.loss_scale->loss_scale.template item<float>() << "\n";
  }
  if (world == 1) {
    out << "traces: train_step " << traces;
  } else {
    out << "traces: grad_step " << traces << ", update_step " << update_step.trace_count();
  }
  out << ", evaluate " << correct.trace_count() << "\n";
  if (rank != 0) return 0;
  if (!ckpt.empty()) out << "checkpoint: " << ckpt << "\n";
  const int done = st.epochs_done.template item<std::int32_t>();
  if (!cfg.no_plot && done > 0) {
    const std::string path =
        !cfg.plot.empty() ? cfg.plot : stem + ".svg";
    std::vector<double> losses, accuracies;
    for (int e = 0; e < done; ++e) {
      losses.push_back(history[static_cast<std::size_t>(2 * e)]);
      accuracies.push_back(history[static_cast<std::size_t>(2 * e + 1)]);
    }
    fmnist::write_plot_svg(path, std::string("kiln: ") + M::kName + " on Fashion-MNIST",
                           losses, accuracies);
    out << "plot: " << path << "\n";
  }
  if (!cfg.json.empty()) write_json(cfg.json, cfg, device, results, traces);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train an MLP or a small CNN on Fashion-MNIST with kiln."};
  app.add_option("--model", cfg.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Epochs (default: mlp 10, cnn 3)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", cfg.batch_size, "Minibatch size")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--device", cfg.device, "cpu, vulkan or vulkan:N (default: KILN_DEVICE, "
                                         "else a GPU if there is one, else cpu)");
  app.add_option("--seed", cfg.seed, "PRNG seed")->capture_default_str();
  app.add_option("--lr", cfg.learning_rate, "Initial learning rate")->capture_default_str();
  app.add_option("--data", cfg.data, "Directory with the four *-ubyte.gz files")
      ->capture_default_str();
  app.add_option("--checkpoint", cfg.checkpoint,
                 "Checkpoint written after each epoch (default "
                 "fashion_mnist_<model>_<device>_<epochs>ep.npz)");
  app.add_flag("--resume", cfg.resume, "Continue from the checkpoint");
  app.add_flag("--no-checkpoint", cfg.no_checkpoint, "Write no checkpoint");
  app.add_option("--plot", cfg.plot, "SVG plot of the curves (default "
                 "fashion_mnist_<model>_<device>_<epochs>ep.svg)");
  app.add_flag("--no-plot", cfg.no_plot, "Write no plot");
  app.add_option("--json", cfg.json, "Write per-epoch results as JSON to this file");
  app.add_option("--train-limit", cfg.train_limit,
                 "Train on the first N training images only (0: all)");
  app.add_option("--test-limit", cfg.test_limit,
                 "Evaluate on the first N test images only (0: all)");
  app.add_option("--stop-after", cfg.stop_after,
                 "Stop after this many epochs of this run (continue later with --resume)");
  app.add_option("--processes", cfg.processes,
                 "Train data parallel in this many processes on this machine (kiln::dist)")
      ->check(CLI::PositiveNumber);
  std::vector<std::string> precision_names;
  for (const auto& entry : precisions()) precision_names.push_back(entry.first);
  app.add_option("--precision", cfg.precision,
                 "Compute dtype: f32, or below with f32 master weights and dynamic loss "
                 "scaling")
      ->check(CLI::IsMember(precision_names))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cfg.epochs == 0) cfg.epochs = cfg.model == "cnn" ? 3 : 10;

  try {
    if (cfg.processes > 1 && std::getenv("KILN_RANK") == nullptr) {
      // Start the ranks: this program again, each with KILN_RANK etc. set.
      std::vector<std::string> args(argv, argv + argc);
      args[0] = std::filesystem::read_symlink("/proc/self/exe").string();
      dist::LaunchOptions launch;
      launch.capture_output = false;  // the ranks print straight to this terminal
      // Share the cores, not N x all: kiln's pool (its kernels and f32 GEMMs)
      // and OpenBLAS's (f64) each get the rank's share.
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      const std::string share = std::to_string(std::max(1u, cores / unsigned(cfg.processes)));
      for (const char* var : {"OPENBLAS_NUM_THREADS", "KILN_NUM_THREADS"}) {
        if (std::getenv(var) == nullptr) launch.env.push_back(std::string(var) + "=" + share);
      }
      const dist::LaunchResult r = dist::launch_local(cfg.processes, args, launch);
      if (!r.ok()) std::cerr << r.summary();
      return r.ok() ? 0 : 1;
    }
    if (!cfg.device.empty()) set_default_device(parse_device(cfg.device));
    const dist::Group group = dist::init();  // a world of one without KILN_WORLD_SIZE
    fmnist::Dataset data = fmnist::load(cfg.data);
    data.train.truncate(cfg.train_limit);
    data.test.truncate(cfg.test_limit);
    return cfg.model == "cnn" ? train<fmnist::Cnn>(cfg, data, group)
                              : train<fmnist::Mlp>(cfg, data, group);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
