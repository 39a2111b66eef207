// braid._braid: the Python binding of braid's C API (capi/braid.h), built
// with Debian's pybind11. Arrays come in through DLPack (`__dlpack__`), so
// NumPy arrays, torch tensors and JAX arrays are used in place, never copied.
// Only libbraid.so's C functions are called: the process holds one braid
// runtime whether it is reached from here, from braid.torch or from C.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capi/braid.h"
#include "python/braid_binding.h"

namespace braid_py {

void DefReductions(py::class_<Group, std::shared_ptr<Group>>& cls) {
  cls
      .def(
          "all_reduce",
          [](Group& g, py::handle x, const std::string& op, py::object out, bool async_op) {
            const braid_op o = OpOf(op);
            return g.InOut(x, out, async_op, "all_reduce",
                           [o](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_all_reduce(group, in, output, o, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("op") = "sum", py::arg("out") = py::none(), py::arg("async_op") = false)
      .def(
          "reduce",
          [](Group& g, py::handle x, int dst, const std::string& op, py::object out, bool async_op) {
            const braid_op o = OpOf(op);
            return g.InOut(x, out, async_op, "reduce",
                           [o, dst](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_reduce(group, in, output, o, dst, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("dst") = 0, py::arg("op") = "sum", py::arg("out") = py::none(),
          py::arg("async_op") = false)
      .def(
          "all_gather",
          [](Group& g, py::object out, py::handle x, bool async_op) {
            return g.InOut(x, out, async_op, "all_gather",
                           [](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_all_gather(group, in, output, nullptr, w);
                           });
          },
          py::arg("out"), py::arg("x"), py::arg("async_op") = false)
      .def(
          "reduce_scatter",
          [](Group& g, py::object out, py::handle x, const std::string& op, bool async_op) {
            const braid_op o = OpOf(op);
            return g.InOut(x, out, async_op, "reduce_scatter",
                           [o](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_reduce_scatter(group, in, output, o, nullptr, w);
                           });
          },
          py::arg("out"), py::arg("x"), py::arg("op") = "sum", py::arg("async_op") = false)
      .def(
          "all_to_all",
          [](Group& g, py::object out, py::handle x, bool async_op) {
            return g.InOut(x, out, async_op, "all_to_all",
                           [](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_all_to_all(group, in, output, nullptr, w);
                           });
          },
          py::arg("out"), py::arg("x"), py::arg("async_op") = false);
}

void DefMoves(py::class_<Group, std::shared_ptr<Group>>& cls) {
  cls
      .def(
          "broadcast",
          [](Group& g, py::handle x, int src, bool async_op) {
            return g.InOut(x, py::none(), async_op, "broadcast",
                           [src](braid_group* group, braid_buffer* buffer, braid_buffer*, braid_work** w) {
                             return braid_broadcast(group, buffer, src, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("src") = 0, py::arg("async_op") = false)
      .def(
          "send",
          [](Group& g, py::handle x, int dst, bool async_op) {
            return g.InOut(x, py::none(), async_op, "send",
                           [dst](braid_group* group, braid_buffer* buffer, braid_buffer*, braid_work** w) {
                             return braid_send(group, buffer, dst, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("dst"), py::arg("async_op") = false)
      .def(
          "recv",
          [](Group& g, py::handle x, py::object src, bool async_op) {
            // No src: from whichever rank sends first (shm, tcp, mpi); async_op's Work.source names it.
            const int peer = src.is_none() ? BRAID_ANY_SOURCE : src.cast<int>();
            return g.InOut(x, py::none(), async_op, "recv",
                           [peer](braid_group* group, braid_buffer* buffer, braid_buffer*, braid_work** w) {
                             return braid_recv(group, buffer, peer, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("src") = py::none(), py::arg("async_op") = false)
      .def(
          "barrier",
          [](Group& g, bool async_op) {
            return g.Run({}, py::none(), async_op, [](braid_group* group, std::vector<Borrowed>&, braid_work** w) {
              return braid_barrier(group, nullptr, w);
            });
          },
          py::arg("async_op") = false)
      .def(
          "broadcast_parameters",
          [](Group& g, py::list arrays, int src) {
            std::vector<Borrowed> borrowed;
            std::vector<braid_buffer> buffers;
            for (py::handle a : arrays) {
              borrowed.push_back(Borrow(a, "broadcast_parameters"));
              buffers.push_back(borrowed.back().buffer());
            }
            braid_group* group = g.get();
            CheckWithoutGil([&] {
              return braid_broadcast_buffers(group, buffers.data(), static_cast<int>(buffers.size()), src);
            });
          },
          py::arg("arrays"), py::arg("src") = 0);
}

}  // namespace braid_py

PYBIND11_MODULE(_braid, m) {
  using namespace braid_py;  // NOLINT(build/namespaces)
  m.doc() = "braid's collectives over DLPack arrays (the C API of libbraid.so)";
  error_type = PyErr_NewExceptionWithDoc(
      "braid.Error", "A braid failure: the message names rank, peer and collective; .code is braid's status code.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(error_type);
  m.def("version", &braid_version);

  py::class_<Work>(m, "Work")
      .def("wait", &Work::Wait, py::arg("timeout") = py::none(),
           "Blocks until the collective is done and returns its output; raises braid.Error.")
      .def("is_completed", &Work::IsCompleted)
      .def_property_readonly("source", &Work::Source,
                             "The rank a finished recv received from (recv without src learns it); -1 before.");

  auto group = py::class_<Group, std::shared_ptr<Group>>(m, "Group")
      .def(py::init<py::object, py::object>(), py::arg("timeout") = py::none(), py::arg("transport") = py::none())
      .def_property_readonly("rank", &Group::rank)
      .def_property_readonly("size", &Group::size)
      .def_property_readonly("local_rank", &Group::local_rank)
      .def_property_readonly("local_size", &Group::local_size)
      .def_property_readonly("transport", &Group::transport)
      .def_property_readonly("_handle", [](const Group& g) { return reinterpret_cast<uintptr_t>(g.get()); },
                             "The braid_group* (braid.torch.share_backend issues on the same group).")
      .def_static("_adopt", &Group::Adopt, py::arg("handle"),
                  "A Group over a braid group this process already holds (another Group's or a torch backend's).")
      .def_property_readonly("is_member", [](const Group& g) { return braid_group_is_member(g.get()) != 0; })
      .def("split", &Group::Split, py::arg("color"), py::arg("key") = 0, py::arg("name") = "",
           "Collective: the ranks of one color (>= 0) form a group ordered by (key, rank); a negative color gets "
           "a group that refuses every collective.")
      .def("new_group", &Group::NewGroup, py::arg("ranks"), py::arg("name") = "",
           "Collective: the group of `ranks` (every rank passes the same list); outsiders get a group that "
           "refuses every collective.")
      .def("close", &Group::Close)
      .def("abort", &Group::Abort, py::arg("reason") = "aborted from Python");
  DefReductions(group);
  DefMoves(group);

  py::class_<Reducer>(m, "Reducer")
      .def(py::init<std::shared_ptr<Group>, py::list, double, double, bool>(), py::arg("group"),
           py::arg("gradients"), py::arg("bucket_cap_mb") = 25.0, py::arg("first_bucket_mb") = 1.0,
           py::arg("find_unused_parameters") = false, py::keep_alive<1, 2>())
      .def("prepare", &Reducer::Prepare)
      .def("mark_ready", &Reducer::MarkReady, py::arg("index"))
      .def("finalize", &Reducer::Finalize)
      .def("no_sync_begin", &Reducer::NoSyncBegin)
      .def("no_sync_end", &Reducer::NoSyncEnd);
}
