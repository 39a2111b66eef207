"""Test outcomes from a `torch_conformance.py -v` log (unittest's verbose output).

    conformance_outcomes.py LOG        # prints "test_name STATUS" per test, in the log's order

unittest -v writes "test_x (...) ... STATUS"; the spawned ranks' log lines may come between the
description and the status, which then stands on a line of its own.
"""
import re
import sys

STATUS = re.compile(r"(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
TEST = re.compile(r"(test_\w+) \(.*\) \.\.\. ?(.*)$")


def outcomes(path):
    found, current = {}, None
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = TEST.match(line)
        if m:
            current, rest = m.group(1), m.group(2)
            s = STATUS.search(rest)
            if s and rest.startswith(s.group(1)):
                found[current], current = s.group(1), None
            continue
        s = STATUS.match(line)
        if current and s:
            found[current], current = s.group(1), None
    return found


if __name__ == "__main__":
    for name, status in outcomes(sys.argv[1]).items():
        print(name, status)
