// kiln bench MODEL [--inputs IN.safetensors] [--outputs OUT.safetensors]
//                  [--iters N] [--warmup N] [--threads T] [--json FILE] [--trace FILE] [COMPILE OPTIONS]
// kiln bench MODEL --stream N [--seed S] [--threads T] [--json FILE] [COMPILE OPTIONS]
//
// Build (compile or load) time, then latency: on a backend with a device of
// its own, calls with inputs, outputs and state resident there (device time,
// timed fences), end to end from device tensors (wall clock), and always end
// to end from host tensors (wall clock, including copies). --threads: calls
// per second of T sessions on T threads beside one. --stream: a server's
// view of a program with dynamic sizes: N requests whose sizes are drawn at
// random from the program's ranges, each timed host to host, the stream run
// twice in one session. --trace FILE: one more call, traced, as a Chrome trace
// (kiln/trace.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "cli.h"
#include "kiln/device.h"
#include "kiln/kiln.h"
#include "kiln/safetensors.h"

namespace kiln::cli {

namespace {

struct Stats {
  double median = 0, p90 = 0, mean = 0;
};

Stats stats_of(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.median = ms[ms.size() / 2];
  s.p90 = ms[std::min(ms.size() - 1, ms.size() * 9 / 10)];
  for (double m : ms) s.mean += m;
  s.mean /= static_cast<double>(ms.size());
  return s;
}

// Random inputs when none are given: floats in [-1, 1), integers in [0, 10), never all zeros.
Tensor random_input(const TensorSpec& spec, const Shape& sizes, std::mt19937& rng) {
  Tensor t = Tensor::zeros(spec.dtype, sizes);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  Tensor src = Tensor::zeros(DType::Float64, sizes);
  double* p = src.data<double>();
  for (int64_t i = 0; i < src.numel(); ++i) p[i] = is_floating(spec.dtype) ? real(rng) : small(rng);
  t.copy_from(src);
  return t;
}

// The sizes of `spec` where every symbol has the value `symbols` gives
// (symbols missing: their smallest useful value, 1).
Expected<Shape> sizes_of(const TensorSpec& spec, const std::map<std::string, int64_t>& symbols) {
  Shape sizes;
  for (const std::string& d : spec.dims) {
    char* end = nullptr;
    const long long v = std::strtoll(d.c_str(), &end, 10);
    if (end && *end == '\0' && v >= 0) {
      sizes.push_back(v);
    } else if (auto it = symbols.find(d); it != symbols.end()) {
      sizes.push_back(it->second);
    } else if (symbols.empty()) {
      sizes.push_back(1);
    } else {
      return invalid_argument("input '" + spec.name + "' has size " + d +
                              ", which is not one symbol: --stream draws each symbol and needs every dynamic "
                              "input size to be one");
    }
  }
  return sizes;
}

Tensor random_input(const TensorSpec& spec, std::mt19937& rng) { return random_input(spec, *sizes_of(spec, {}), rng); }

double percentile(std::vector<double> ms, double q) {
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  const size_t i = std::min(ms.size() - 1, static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5));
  return ms[i];
}

// Calls per second of `threads` sessions of `program`, one per thread, each
// making `calls` calls on the request list (thread t starts at request t),
// host tensors in and out; every output checked bit for bit against
// `expected` (the serial call's outputs for each request).
Expected<double> calls_per_second(const std::shared_ptr<const Program>& program,
                                  const std::vector<std::vector<Tensor>>& requests,
                                  const std::vector<std::vector<Tensor>>& expected, int threads, int calls) {
  std::vector<std::unique_ptr<Session>> sessions;
  for (int t = 0; t < threads; ++t) sessions.push_back(std::make_unique<Session>(program));
  std::vector<Status> failures(static_cast<size_t>(threads));
  std::atomic<bool> go{false};
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      // Every session warm at every request's size, all at once (as a
      // server's threads start), before the clock starts.
      for (const std::vector<Tensor>& r : requests)
        if (auto warm = sessions[static_cast<size_t>(t)]->run(r); !warm && failures[static_cast<size_t>(t)].is_ok())
          failures[static_cast<size_t>(t)] = warm.status();
      ++ready;
      while (!go.load()) std::this_thread::yield();
      if (!failures[static_cast<size_t>(t)].is_ok()) return;
      for (int i = 0; i < calls; ++i) {
        const size_t r = static_cast<size_t>(t + i) % requests.size();
        auto out = sessions[static_cast<size_t>(t)]->run(requests[r]);
        if (!out) {
          failures[static_cast<size_t>(t)] = out.status();
          return;
        }
        for (size_t o = 0; o < out->size(); ++o)
          if ((*out)[o].nbytes() != expected[r][o].nbytes() ||
              std::memcmp((*out)[o].raw_data(), expected[r][o].raw_data(), static_cast<size_t>((*out)[o].nbytes())) !=
                  0) {
            failures[static_cast<size_t>(t)] =
                internal_error("session " + std::to_string(t) + ", request " + std::to_string(r) + ": output " +
                               std::to_string(o) + " differs from the same request's output in one session alone");
            return;
          }
      }
    });
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go = true;
  for (std::thread& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const Status& f : failures) KILN_TRY(f);
  return static_cast<double>(threads) * calls / s;
}

// Device time per call with inputs, outputs and state resident on the
// session's device: calls enqueued back to back on the device's stream into
// output memory allocated once, a timed fence after each; the time between
// consecutive fences is one call's work on the device (the host enqueues
// ahead of the device whenever the device is the slower one; where the host
// is slower, its time shows as the device's idle time). Milliseconds per
// call; kUnsupported when the session computes in host memory.
Expected<std::vector<double>> resident_call_ms(Session& session, const std::vector<Tensor>& device_inputs, int warmup,
                                               int iters) {
  const Device device = session.state_device();
  if (device.is_cpu()) return unsupported("the program computes in host memory");
  RunOptions options;
  KILN_ASSIGN_OR_RETURN(options.stream, default_stream(device));
  auto types = session.output_types(device_inputs);
  if (types) {
    for (const OutputType& t : *types) {
      KILN_ASSIGN_OR_RETURN(Tensor o, empty_on(device, t.dtype, t.sizes, options.stream));
      options.outputs.push_back(std::move(o));
    }
  } else if (types.status().code() != ErrorCode::kUnsupported) {
    return types.status();  // sizes set by data: kiln allocates the outputs per call
  }
  for (int i = 0; i < warmup; ++i) KILN_TRY(session.run(device_inputs, options).status());
  KILN_TRY(session.synchronize());
  std::vector<StreamEvent> fences;
  KILN_ASSIGN_OR_RETURN(StreamEvent start, StreamEvent::record(device, options.stream));
  fences.push_back(std::move(start));
  for (int i = 0; i < iters; ++i) {
    KILN_TRY(session.run(device_inputs, options).status());
    KILN_ASSIGN_OR_RETURN(StreamEvent f, StreamEvent::record(device, options.stream));
    fences.push_back(std::move(f));
  }
  KILN_TRY(session.synchronize());
  std::vector<double> ms;
  for (size_t i = 1; i < fences.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(double t, fences[i].ms_since(fences[i - 1]));
    ms.push_back(t);
  }
  return ms;
}

// kiln bench --stream: see the file comment.
int run_stream(const std::shared_ptr<const Program>& program, const Args& args, const std::string& precision,
               double build_s, int count, uint32_t seed, int threads) {
  const std::vector<SymbolInfo>& symbols = program->symbols();
  if (symbols.empty())
    return fail(
        invalid_argument("--stream draws sizes from a program's dynamic sizes; " + args.positional[0] + " has none"));
  for (const SymbolInfo& y : symbols)
    if (y.max == INT64_MAX)
      return fail(invalid_argument("--stream: size " + y.name + " has no upper bound; give it one with --shape"));
  std::mt19937 rng(seed);
  std::vector<std::vector<Tensor>> requests;
  std::vector<std::string> labels;
  for (int i = 0; i < count; ++i) {
    std::map<std::string, int64_t> values;
    std::string label;
    for (const SymbolInfo& y : symbols) {
      values[y.name] = std::uniform_int_distribution<int64_t>(std::max<int64_t>(y.min, 1), y.max)(rng);
      label += (label.empty() ? "" : ",") + y.name + "=" + std::to_string(values[y.name]);
    }
    std::vector<Tensor> inputs;
    for (const TensorSpec& spec : program->inputs()) {
      auto sizes = sizes_of(spec, values);
      if (!sizes) return fail(sizes.status());
      inputs.push_back(random_input(spec, *sizes, rng));
    }
    requests.push_back(std::move(inputs));
    labels.push_back(std::move(label));
  }
  Session session(program);
  std::vector<std::vector<Tensor>> expected(requests.size());
  auto pass = [&](std::vector<double>& ms) -> Status {
    for (size_t r = 0; r < requests.size(); ++r) {
      const auto s = std::chrono::steady_clock::now();
      auto out = session.run(requests[r]);
      if (!out) return out.status().with_context("request " + std::to_string(r) + " (" + labels[r] + ")");
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
      expected[r] = std::move(*out);
    }
    return Status::ok();
  };
  std::vector<double> first, second;
  if (Status st = pass(first); !st) return fail(st);
  if (Status st = pass(second); !st) return fail(st);
  const std::set<std::string> distinct(labels.begin(), labels.end());
  auto worst = [&](const std::vector<double>& ms) {
    return static_cast<size_t>(std::max_element(ms.begin(), ms.end()) - ms.begin());
  };
  std::optional<double> cps1, cpsn;
  if (threads > 1) {
    const int calls = std::max(count, 200);
    auto one = calls_per_second(program, requests, expected, 1, calls);
    if (!one) return fail(one.status());
    auto many = calls_per_second(program, requests, expected, threads, calls);
    if (!many) return fail(many.status());
    cps1 = *one;
    cpsn = *many;
  }
  std::printf("model      %s\n", args.positional[0].c_str());
  std::printf("device     %s, precision %s\n", program->device().c_str(), precision.c_str());
  std::printf("build      %.3f s\n", build_s);
  std::printf("stream     %d requests, %zu distinct sizes, seed %u, host tensors in and out, one session\n", count,
              distinct.size(), seed);
  for (auto [name, ms] : {std::pair{"first pass ", &first}, std::pair{"second pass", &second}})
    std::printf("%s p50 %.4f ms, p99 %.4f ms, max %.4f ms (%s), first request %.4f ms\n", name, percentile(*ms, 0.5),
                percentile(*ms, 0.99), (*ms)[worst(*ms)], labels[worst(*ms)].c_str(), ms->front());
  if (cps1)
    std::printf(
        "sessions   1 thread %.1f calls/s, %d threads %.1f calls/s (%.2fx), outputs identical to one session's\n",
        *cps1, threads, *cpsn, *cpsn / *cps1);
  if (auto json_path = args.get("json")) {
    auto summary = [&](const std::vector<double>& ms) {
      return nlohmann::json{{"p50_ms", percentile(ms, 0.5)},
                            {"p99_ms", percentile(ms, 0.99)},
                            {"max_ms", ms[worst(ms)]},
                            {"max_at", labels[worst(ms)]},
                            {"first_request_ms", ms.front()}};
    };
    nlohmann::json j = {{"model", args.positional[0]},
                        {"device", program->device()},
                        {"precision", precision},
                        {"build_s", build_s},
                        {"requests", count},
                        {"distinct_sizes", distinct.size()},
                        {"seed", seed},
                        {"first_pass", summary(first)},
                        {"second_pass", summary(second)},
                        {"sizes", labels},
                        {"first_pass_ms", first},
                        {"second_pass_ms", second}};
    if (cps1) j["sessions"] = {{"threads", threads}, {"one_thread_calls_per_s", *cps1}, {"calls_per_s", *cpsn}};
    std::ofstream f(*json_path);
    f << j.dump(2) << "\n";
    if (!f) return fail(io_error("cannot write " + *json_path));
  }
  return kExitOk;
}

}  // namespace

int run_bench(int argc, char** argv) {
  auto args = parse_args(
      argc, argv, 2,
      with({"inputs", "outputs", "iters", "warmup", "json", "stream", "seed", "threads", "trace"}, kCompileValued),
      kCompileFlags);
  if (!args) return fail(args.status());
  if (args->positional.size() != 1)
    return fail(invalid_argument(
        "usage: kiln bench MODEL [--inputs IN.safetensors] [--outputs OUT.safetensors] "
        "[--iters N] [--warmup N] [--threads T] [--json FILE] [--trace FILE] [COMPILE OPTIONS]\n"
        "       kiln bench MODEL --stream N [--seed S] [--threads T] [--json FILE] [COMPILE OPTIONS]"));
  int iters = 100, warmup = 10, stream = 0, seed = 0, threads = 1;
  for (auto [name, slot, lo, hi] : {std::tuple{"iters", &iters, 1, 1000000}, std::tuple{"warmup", &warmup, 0, 1000000},
                                    std::tuple{"stream", &stream, 1, 1000000}, std::tuple{"seed", &seed, 0, 1 << 30},
                                    std::tuple{"threads", &threads, 1, 256}}) {
    if (auto v = args->get(name)) {
      auto d = parse_double("--" + std::string(name), *v);
      if (!d) return fail(d.status());
      if (*d < lo || *d > hi || *d != static_cast<int>(*d))
        return fail(invalid_argument("--" + std::string(name) + " needs a whole number in [" + std::to_string(lo) +
                                     ", " + std::to_string(hi) + "], got '" + *v + "'"));
      *slot = static_cast<int>(*d);
    }
  }
  if (stream > 0 && (args->get("inputs") || args->get("outputs") || args->get("iters") || args->get("warmup")))
    return fail(
        invalid_argument("--stream makes its own inputs and times each request once per pass: "
                         "--inputs, --outputs, --iters and --warmup do not apply"));
  if (stream == 0 && args->get("seed")) return fail(invalid_argument("--seed is for --stream"));
  if (stream > 0 && args->get("trace"))
    return fail(invalid_argument("--trace traces one call of the timed inputs; it does not apply to --stream"));
  auto options = load_options(*args, true);
  if (!options) return fail(options.status());
  const auto t0 = std::chrono::steady_clock::now();
  auto program = load_model(args->positional[0], *args, *options);
  if (!program) return fail(program.status());
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stream > 0)
    return run_stream(*program, *args, std::string(name_of(options->compile.precision)), build_s, stream,
                      static_cast<uint32_t>(seed), threads);

  std::vector<Tensor> inputs;
  if (auto in_path = args->get("inputs")) {
    auto io = read_safetensors(*in_path);
    if (!io) return fail(io.status());
    for (size_t i = 0; i < (*program)->inputs().size(); ++i) {
      const Tensor* t = io->find("input." + std::to_string(i));
      if (!t) return fail(not_found(*in_path + ": no tensor 'input." + std::to_string(i) + "'"));
      inputs.push_back(*t);
    }
  } else {
    std::mt19937 rng(0);
    for (const TensorSpec& s : (*program)->inputs()) inputs.push_back(random_input(s, rng));
  }

  // The first call on its own: engines loaded onto the device, and for an
  // engine serving a range of shapes, the steps of this shape made.
  Session session(*program);
  const auto first_start = std::chrono::steady_clock::now();
  auto outputs = session.run(inputs);
  if (!outputs) return fail(outputs.status());
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_start).count();
  if (auto out_path = args->get("outputs")) {
    std::vector<std::pair<std::string, Tensor>> named;
    for (size_t j = 0; j < outputs->size(); ++j) named.emplace_back("output." + std::to_string(j), (*outputs)[j]);
    if (Status s = write_safetensors(*out_path, named); !s) return fail(s);
  }

  // End to end from host tensors.
  for (int i = 0; i < warmup; ++i)
    if (auto r = session.run(inputs); !r) return fail(r.status());
  std::vector<double> host_ms;
  const int host_iters = std::min(iters, 50);
  for (int i = 0; i < host_iters; ++i) {
    const auto s = std::chrono::steady_clock::now();
    if (auto r = session.run(inputs); !r) return fail(r.status());
    host_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  const Stats host = stats_of(host_ms);

  // End to end from tensors already on the program's device (what a caller
  // holding CUDA tensors gets): outputs stay there, each call waited for.
  std::optional<Stats> on_device;
  std::vector<Tensor> device_inputs;
  if (const Device d = session.state_device(); !d.is_cpu()) {
    for (const Tensor& t : inputs) {
      auto dt = to_device(t, d);
      if (!dt) return fail(dt.status());
      device_inputs.push_back(*dt);
    }
    auto call = [&]() -> Status {
      auto r = session.run(device_inputs);
      if (!r) return r.status();
      return session.synchronize();
    };
    for (int i = 0; i < warmup; ++i)
      if (Status st = call(); !st) return fail(st);
    std::vector<double> ms;
    for (int i = 0; i < host_iters; ++i) {
      const auto s = std::chrono::steady_clock::now();
      if (Status st = call(); !st) return fail(st);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
    }
    on_device = stats_of(ms);
  }

  // Calls on resident memory, device time, where the program has a device.
  std::string timing = "end to end from host tensors (wall clock)";
  Stats dev = host;
  if (!session.state_device().is_cpu()) {
    auto resident = resident_call_ms(session, device_inputs, warmup, iters);
    if (!resident) return fail(resident.status());
    dev = stats_of(*resident);
    timing = "calls on device-resident inputs, outputs and state (device time, enqueued back to back)";
  }

  int engines = 0, fallback_nodes = 0;
  for (const SegmentInfo& s : (*program)->segments()) {
    if (s.engine) {
      ++engines;
    } else {
      fallback_nodes += s.num_nodes;
    }
  }
  const int64_t batch = inputs.empty() || inputs[0].dim() == 0 ? 1 : inputs[0].size(0);
  const double throughput = dev.median > 0 ? 1000.0 * static_cast<double>(batch) / dev.median : 0;

  std::printf("model      %s\n", args->positional[0].c_str());
  std::printf("device     %s, precision %s\n", (*program)->device().c_str(),
              std::string(name_of(options->compile.precision)).c_str());
  std::printf("segments   %d engine(s), %d node(s) in fallback\n", engines, fallback_nodes);
  std::printf("build      %.3f s\n", build_s);
  std::printf("first call %.3f ms (engines loaded, steps of a new shape made)\n", first_ms);
  std::printf("latency    median %.4f ms, p90 %.4f ms over %d runs: %s\n", dev.median, dev.p90, iters, timing.c_str());
  std::printf("end to end median %.4f ms, p90 %.4f ms over %d runs (host tensors in and out)\n", host.median, host.p90,
              host_iters);
  if (on_device)
    std::printf("from device tensors median %.4f ms, p90 %.4f ms over %d runs (inputs and outputs on %s)\n",
                on_device->median, on_device->p90, host_iters, session.state_device().to_string().c_str());
  std::printf("throughput %.1f samples/s (batch %lld)\n", throughput, static_cast<long long>(batch));
  std::optional<std::pair<double, double>> sessions;
  if (threads > 1) {
    auto serial = session.run(inputs);
    if (!serial) return fail(serial.status());
    const std::vector<std::vector<Tensor>> requests{inputs}, expected{*serial};
    auto one = calls_per_second(*program, requests, expected, 1, iters);
    if (!one) return fail(one.status());
    auto many = calls_per_second(*program, requests, expected, threads, iters);
    if (!many) return fail(many.status());
    sessions = {*one, *many};
    std::printf(
        "sessions   1 thread %.1f calls/s, %d threads %.1f calls/s (%.2fx), host tensors in and out, "
        "outputs identical to one session's\n",
        *one, threads, *many, *many / *one);
  }

  // One more call, traced, after every timed one (a traced call runs its
  // engines' steps one by one and waits for the device): from device
  // tensors where the program has a device, else host tensors.
  if (auto trace_path = args->get("trace")) {
    Trace trace;
    RunOptions traced;
    traced.trace = &trace;
    if (auto r = session.run(device_inputs.empty() ? inputs : device_inputs, traced); !r) return fail(r.status());
    if (Status st = trace.write(*trace_path); !st) return fail(st);
    std::printf("trace      %s: one call, %zu slices (open in Perfetto or chrome://tracing)\n", trace_path->c_str(),
                trace.events().size());
  }

  if (auto json_path = args->get("json")) {
    nlohmann::json j = {{"model", args->positional[0]},
                        {"device", (*program)->device()},
                        {"precision", std::string(name_of(options->compile.precision))},
                        {"build_s", build_s},
                        {"first_call_ms", first_ms},
                        {"median_ms", dev.median},
                        {"p90_ms", dev.p90},
                        {"mean_ms", dev.mean},
                        {"timing", timing},
                        {"end_to_end_median_ms", host.median},
                        {"end_to_end_p90_ms", host.p90},
                        {"throughput_per_s", throughput},
                        {"batch", batch},
                        {"iters", iters},
                        {"warmup", warmup},
                        {"engines", engines},
                        {"fallback_nodes", fallback_nodes}};
    if (sessions)
      j["sessions"] = {
          {"threads", threads}, {"one_thread_calls_per_s", sessions->first}, {"calls_per_s", sessions->second}};
    if (on_device) {
      j["device_tensors_median_ms"] = on_device->median;
      j["device_tensors_p90_ms"] = on_device->p90;
    }
    std::ofstream f(*json_path);
    f << j.dump(2) << "\n";
    if (!f) return fail(io_error("cannot write " + *json_path));
  }
  return kExitOk;
}

}  // namespace kiln::cli
