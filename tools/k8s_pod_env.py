#!/usr/bin/env python3
"""What a pod of an Indexed Job gets: the environment and command of its
container, as Kubernetes would set them for completion index INDEX.

    tools/k8s_pod_env.py MANIFEST INDEX env     # KEY=VALUE lines
    tools/k8s_pod_env.py MANIFEST INDEX argv    # command and args, one per line

Literal `value`s are copied; the downward API's completion index
(metadata.annotations['batch.kubernetes.io/job-completion-index']) becomes
INDEX; Kubernetes adds JOB_COMPLETION_INDEX itself. Anything else (another
fieldRef, a secretKeyRef) is an error: the contract test must see all of it.
"""
import sys

import yaml

INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def indexed_job(path):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "Job" and doc["spec"].get("completionMode") == "Indexed":
                return doc
    sys.exit(f"{path}: no Indexed Job")


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("env", "argv"):
        sys.exit(__doc__)
    job = indexed_job(sys.argv[1])
    index = int(sys.argv[2])
    completions = job["spec"]["completions"]
    if not 0 <= index < completions:
        sys.exit(f"index {index} outside the job's {completions} completions")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    if sys.argv[3] == "argv":
        print("\n".join(container.get("command", []) + container.get("args", [])))
        return
    env = {"JOB_COMPLETION_INDEX": str(index)}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == INDEX_FIELD:
            env[var["name"]] = str(index)
        else:
            sys.exit(f"{var['name']}: a source this renderer does not know: {var}")
    for key, value in env.items():
        print(f"{key}={value}")


if __name__ == "__main__":
    main()
