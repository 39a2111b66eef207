// braid._torch: the Python module of the "braid" torch.distributed backend
// (braid/torch/__init__.py registers it with torch).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <string>

#include "capi/braid.h"
#include "python/torch_backend/backend.h"
#include "python/torch_backend/mappable_allocator.h"

PYBIND11_MODULE(_torch, m) {
  using braid_torch::BraidBackend;
  if (braid_abi_version() != BRAID_ABI_VERSION) {
    throw pybind11::import_error("braid._torch was built for braid ABI " + std::to_string(BRAID_ABI_VERSION) +
                                 " but the libbraid.so loaded has ABI " + std::to_string(braid_abi_version()));
  }
  m.doc() = "braid's torch.distributed backend (import braid.torch to register it)";
  // Registers c10d::Backend and c10d::Store with pybind11: the base and the argument types below.
  pybind11::module_::import("torch.distributed");
  pybind11::class_<BraidBackend, c10d::Backend, c10::intrusive_ptr<BraidBackend>>(m, "BraidBackend")
      .def_property_readonly("transport", &BraidBackend::transport,
                             "What carries this group's CPU buffers: 'shm', 'tcp', 'mpi' or 'nccl'.")
      .def_property_readonly("_group_handle", &BraidBackend::group_handle,
                             "The braid_group* this backend issues on (braid._braid.Group._adopt shares it).");
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, double timeout_sec) {
        return BraidBackend::Create(store, rank, world_size, timeout_sec);
      },
      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("world_size"), pybind11::arg("timeout_sec"),
      pybind11::call_guard<pybind11::gil_scoped_release>(),
      "Collective: a braid backend over `store` (rendezvous), as rank `rank` of `world_size`.\n"
      "timeout_sec <= 0: BRAID_TIMEOUT_SEC. Blocks until every rank joined or the deadline; raises\n"
      "RuntimeError with braid's message on failure.");
  m.def(
      "share_backend",
      [](uintptr_t group, const c10::intrusive_ptr<c10d::Store>& store, double timeout_sec) {
        return BraidBackend::Share(reinterpret_cast<braid_group*>(group), store, timeout_sec);
      },
      pybind11::arg("group_handle"), pybind11::arg("store").none(true), pybind11::arg("timeout_sec"),
      "A backend over a braid group this process holds (a Group's or a backend's _group_handle):\n"
      "no rendezvous, the same connections. Not collective. timeout_sec <= 0: BRAID_TIMEOUT_SEC.");
  m.def("use_mappable_memory", &braid_torch::UseMappableMemory, pybind11::arg("min_bytes"),
        "torch's CPU allocations of at least min_bytes come from braid_mem_alloc from now on (process-wide).");
  m.def("use_default_memory", &braid_torch::UseDefaultMemory,
        "torch's CPU allocator as it was before use_mappable_memory.");
  m.attr("braid_version") = braid_version();
}
