#!/usr/bin/env python3
"""The size floors of ARCHITECTURE.md, as numbers CI enforces.

  - no production file over 450 lines (C++, CUDA, Python, shell; tests/ and
    third_party/ are exempt);
  - no C++ function over 80 lines: a definition that starts in column 0 and
    ends at the next "}" in column 0 (Google style: namespaces do not indent
    their contents; member functions written inside a class body are not
    measured);
  - commit subjects under 72 characters, for every commit after
    SUBJECTS_FROM (the rule's start).

What was over a limit when the rule came is listed in tools/floors_debt.txt
with its size then: such an entry may shrink but not grow, and an entry
that is no longer over the limit must be removed, so the list only gets
shorter. Exit status 1 and one line per violation otherwise.

  tools/check_floors.py [ROOT]
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
MAX_SUBJECT = 71
SUBJECTS_FROM = '1d8d670'  # the last commit before the rule; later subjects count
SOURCE = re.compile(r'\.(cc|h|cu|py|sh)$')
CXX = re.compile(r'\.(cc|h|cu)$')
NOT_A_FUNCTION = re.compile(
    r'^(namespace|class |struct |enum |union |extern |using |typedef |template\s*<[^>]*>\s*(class|struct) )')


def long_functions(lines, limit):
    """(lines, first line number, signature) of column-0 definitions over `limit` lines."""
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line[0] in ' \t}#/' or NOT_A_FUNCTION.match(line):
            i += 1
            continue
        j = i
        opens = False
        while j < len(lines) and j - i < 6:
            end = lines[j].rstrip()
            if end.endswith('{'):
                opens = True
                break
            if end.endswith((';', '}')):
                break
            j += 1
        # A brace-initialized table ("T x[] = {") is data, not a function.
        if not opens or '(' not in ''.join(lines[i:j + 1]) or '=' in line.split('(')[0]:
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith('}'):
            k += 1
        if k - i + 1 > limit:
            found.append((k - i + 1, i + 1, line.strip()))
        i = k + 1
    return found


def measure(root):
    """{key: size} of everything over a limit; keys are 'file PATH' and 'function PATH SIGNATURE'."""
    files = subprocess.run(['git', '-C', root, 'ls-files'], capture_output=True, text=True, check=True).stdout.split()
    over = {}
    for path in files:
        if not SOURCE.search(path) or path.startswith(('tests/', 'third_party/')):
            continue
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            continue
        lines = open(full, errors='replace').read().split('\n')
        if lines and lines[-1] == '':
            lines.pop()
        if len(lines) > MAX_FILE_LINES:
            over[f'file {path}'] = len(lines)
        if CXX.search(path):
            for size, _, signature in long_functions(lines, MAX_FUNCTION_LINES):
                over[f'function {path} {signature}'] = size
    return over


def read_debt(root):
    debt = {}
    with open(os.path.join(root, 'tools', 'floors_debt.txt')) as f:
        for line in f:
            line = line.rstrip('\n')
            if not line or line.startswith('#'):
                continue
            size, key = line.split(' ', 1)
            debt[key] = int(size)
    return debt


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    over = measure(root)
    debt = read_debt(root)
    problems = []
    for key, size in sorted(over.items()):
        kind = key.split(' ', 1)[0]
        limit = MAX_FILE_LINES if kind == 'file' else MAX_FUNCTION_LINES
        if key not in debt:
            problems.append(f'{key}: {size} lines, over {limit}')
        elif size > debt[key]:
            problems.append(f'{key}: {size} lines, grew past the {debt[key]} listed in tools/floors_debt.txt')
    for key in sorted(set(debt) - set(over)):
        problems.append(f'{key}: no longer over the limit (or gone): remove it from tools/floors_debt.txt')
    shallow = subprocess.run(['git', '-C', root, 'rev-parse', '--is-shallow-repository'], capture_output=True,
                             text=True).stdout.strip() == 'true'
    subjects = subprocess.run(['git', '-C', root, 'log', '--format=%h %s', f'{SUBJECTS_FROM}..HEAD'],
                              capture_output=True, text=True)
    if shallow:
        print('check_floors: a shallow clone: commit subjects not checked', file=sys.stderr)
    elif subjects.returncode == 0:
        for line in subjects.stdout.splitlines():
            commit, subject = line.split(' ', 1)
            if len(subject) > MAX_SUBJECT:
                problems.append(f'commit {commit}: subject of {len(subject)} characters, over {MAX_SUBJECT}')
    else:
        problems.append(f'git log {SUBJECTS_FROM}..HEAD failed (a shallow clone?): {subjects.stderr.strip()}')
    for p in problems:
        print(f'check_floors: {p}', file=sys.stderr)
    if problems:
        print(f'check_floors: {len(problems)} violation(s); see ARCHITECTURE.md', file=sys.stderr)
        return 1
    print(f'check_floors: ok ({len(debt)} listed in tools/floors_debt.txt)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
