# torch_ddp_compare.py REFERENCE.pt OTHER.pt [TOLERANCE]: the parameters two
# torch_ddp.py runs ended with must agree within TOLERANCE (default 1e-4),
# for the same world size and step count; and training must have moved them.
import sys

import torch


def main():
    ref = torch.load(sys.argv[1])
    other = torch.load(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    what = f"{other['mode']} against {ref['mode']}, {ref['world']} ranks"
    assert ref["world"] == other["world"] and ref["steps"] == other["steps"], (ref["world"], other["world"],
                                                                                ref["steps"], other["steps"])
    a, b = ref["params"], other["params"]
    assert a.shape == b.shape and a.numel() == 1000 * 512 + 512 + 512 * 10 + 10, (a.shape, b.shape)
    diff = (a - b).abs().max().item()
    assert diff <= tolerance, f"{what}: parameters differ by up to {diff} (tolerance {tolerance})"
    # A run that did not train would match trivially: the initial parameters
    # (rank 0's, seed 100) must be far from where training took them.
    torch.manual_seed(100)
    initial = torch.nn.Sequential(torch.nn.Linear(1000, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    start = torch.cat([p.detach().reshape(-1) for p in initial.parameters()])
    moved = (a - start).abs().max().item()
    assert moved > 100 * tolerance, f"{what}: training moved the parameters by only {moved}"
    print(f"ddp compare ok: {what}, {ref['steps']} steps: max difference {diff:.3g}, moved {moved:.3g}")


if __name__ == "__main__":
    main()
