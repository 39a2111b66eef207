// torch's c10d::TCPStore clients for bench/store_scale.py, so that both
// stores face the same clients: C++ threads, one connection each, doing
// what bench/store_scale.cc's clients do against braid's store.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/extension.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::vector<uint8_t> Bytes(const std::string& text) { return {text.begin(), text.end()}; }

void Rendezvous(const std::string& host, int port, int id, int total, double timeout_s) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  c10d::TCPStore store(host, options);
  store.set("node/" + std::to_string(id),
            Bytes("10.0." + std::to_string(id / 256) + "." + std::to_string(id % 256) + ":29400"));
  if (store.add("joined", 1) == total) store.set("all_joined", Bytes("1"));
  store.wait({"all_joined"});
  if (store.get("node/" + std::to_string((id + 1) % total)).empty()) throw std::runtime_error("an empty record");
  if (store.add("barrier", 1) == total) store.set("barrier_done", Bytes("1"));
  store.wait({"barrier_done"});
}

// Clients first .. first + clients - 1 of total, a thread each; returns
// how many finished, and the first error.
std::pair<int, std::string> Run(const std::string& host, int port, int first, int clients, int total,
                                double timeout_s) {
  pybind11::gil_scoped_release release;
  std::atomic<int> ok{0};
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, id = first + i] {
      try {
        Rendezvous(host, port, id, total, timeout_s);
        ok.fetch_add(1);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "client " + std::to_string(id) + ": " + e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return {ok.load(), first_error};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &Run); }
