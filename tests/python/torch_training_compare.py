# torch_training_compare.py REFERENCE.pt OTHER.pt [TOLERANCE]: for every feature two
# torch_training.py runs trained, the final parameters must agree within TOLERANCE
# (default 1e-4) and training must have moved them from the initial ones.
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from torch_training import Net  # noqa: E402


def main():
    ref, other = torch.load(sys.argv[1]), torch.load(sys.argv[2])
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    assert ref["world"] == other["world"], (ref["world"], other["world"])
    assert ref["params"].keys() == other["params"].keys(), (ref["params"].keys(), other["params"].keys())
    for feature, a in ref["params"].items():
        torch.manual_seed(5)
        start = torch.cat([p.detach().reshape(-1) for p in Net(side=feature == "unused").parameters()])
        b = other["params"][feature]
        what = f"{feature}: {other['backend']} against {ref['backend']}, {ref['world']} ranks"
        diff = (a - b).abs().max().item()
        assert diff <= tolerance, f"{what}: parameters differ by up to {diff} (tolerance {tolerance})"
        moved = (a - start).abs().max().item()
        assert moved > 100 * tolerance, f"{what}: training moved the parameters by only {moved}"
        print(f"training compare ok: {what}: max difference {diff:.3g}, moved {moved:.3g}")


if __name__ == "__main__":
    main()
