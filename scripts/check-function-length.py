#!/usr/bin/env python3
"""check-function-length.py [--max N] [FILE...] - list the functions longer
than N lines (default 80) in every C and C++ file of the tree (or the FILEs
given), and exit 1 if there is any.

Every function of the tree is held to the limit: the runtime, the daemon,
the trace processor, the command line, the kernel module, the preloads and
the test programs (tests/) alike.  A long one is split into named steps,
each a role (CONTRIBUTING.md, "Style").  Build trees and hidden directories
are skipped.

A function is counted from the line of its name to its closing brace.  The
scanner is a brace counter for this tree's style, not a C++ parser: comments,
strings and character literals are blanked, preprocessor lines are skipped,
and a '{' opens a function body when the text before it (since the last
';', '{' or '}') ends in ')' maybe followed by qualifiers, a trailing return
type or a constructor's initialiser list, and does not start with a control
keyword.  namespace, class, struct, union, enum and extern "C" bodies are
looked into; everything else is a body that is measured whole.  Exit 0 none
too long, 1 some (listed as FILE:LINE: NAME is N lines), 2 usage.
"""
import os
import re
import sys

CONTAINER = re.compile(r'(^|[\s;}])(namespace(\s+[\w:]+)?|extern\s+"C"|(class|struct|union|enum(\s+class)?)\b[^()]*)\s*$')
CONTROL = re.compile(r'^\s*(if|for|while|switch|catch|do|else|return|case)\b')
NAME = re.compile(r'([~\w:]+(?:operator\s*\S+)?)\s*\(')


def blank(text):
    """Comments, strings, char literals and preprocessor lines as spaces
    (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == '#':
            # a directive, with its continuation lines
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append(' \n')
                    i += 2
                    continue
                out.append(' ')
                i += 1
            continue
        if c == '/' and text.startswith('//', i):
            while i < n and text[i] != '\n':
                out.append(' ')
                i += 1
            continue
        if c == '/' and text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
            continue
        if c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(')' + m.group(1) + '"', i)
                end = n if end < 0 else end + len(m.group(1)) + 2
                out.append('""' + re.sub(r'[^\n]', ' ', text[i + 2:end]))
                i = end
                continue
        if c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + (c if j < n else ''))
            i = j + 1
            continue
        out.append(c)
        line_start = c == '\n' or (line_start and c in ' \t')
        i += 1
    return ''.join(out)


def functions(path):
    """(name, first line, last line) of each function body in path."""
    with open(path, encoding='utf-8', errors='replace') as f:
        text = blank(f.read())
    found = []
    stack = []  # per open brace: True if a container
    head_start = 0  # offset where the text before the next '{' begins
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in ';}':
            if c == '}' and stack:
                stack.pop()
            head_start = i + 1
        elif c == '{':
            head = text[head_start:i]
            flat = strip_attributes(' '.join(head.split()))
            if CONTAINER.search(flat) or flat.endswith('extern "C"'):
                stack.append(True)
                head_start = i + 1
            elif all(stack) and is_function_head(flat):
                end = match_brace(text, i)
                m = NAME.findall(flat)
                name = m[0] if m else '?'
                first = text.count('\n', 0, head_start + len(head) - len(head.lstrip())) + 1
                last = text.count('\n', 0, end) + 1
                found.append((name, first, last))
                head_start = end + 1
                i = end + 1
                continue
            else:
                stack.append(False)
                head_start = i + 1
        i += 1
    return found


def strip_attributes(flat):
    """flat without its __attribute__((...)) and [[...]] (nested parentheses)."""
    while True:
        k = flat.find('__attribute__')
        if k < 0:
            break
        j, depth = flat.find('(', k), 0
        if j < 0:
            break
        for e in range(j, len(flat)):
            depth += {'(': 1, ')': -1}.get(flat[e], 0)
            if depth == 0:
                break
        flat = (flat[:k] + flat[e + 1:]).strip()
    return re.sub(r'\[\[.*?\]\]', '', flat).strip()


def is_function_head(flat):
    if not flat or CONTROL.match(flat) or '=' in flat.split('(')[0]:
        return False
    if flat.rstrip().endswith('='):
        return False
    # strip a constructor's initialiser list: ") : a(b), c{d}"
    core = re.sub(r'\)\s*:\s*[^:].*$', ')', flat)
    core = re.sub(r'\s*->\s*[\w:<>,\s*&]+$', '', core)
    core = re.sub(r'(\s+(const|noexcept|override|final|volatile|&|&&|throw\s*\(\s*\)))+$', '', core)
    return core.endswith(')') and '(' in core


def match_brace(text, i):
    depth = 0
    for j in range(i, len(text)):
        if text[j] == '{':
            depth += 1
        elif text[j] == '}':
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def main(argv):
    limit, files = 80, []
    args = iter(argv)
    for a in args:
        if a == '--max':
            limit = int(next(args, '80'))
        elif a.startswith('-'):
            print(__doc__.strip(), file=sys.stderr)
            return 2
        else:
            files.append(a)
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not files:
        for d, dirs, names in os.walk(top):
            dirs[:] = sorted(x for x in dirs if not x.startswith(('.', 'build', 'Testing')))
            files += [os.path.join(d, x) for x in sorted(names) if x.endswith(('.c', '.cpp', '.h'))]
    bad = 0
    for path in files:
        for name, first, last in functions(path):
            lines = last - first + 1
            if lines > limit:
                print('%s:%d: %s is %d lines (at most %d)' % (os.path.relpath(path, top), first, name,
                                                              lines, limit))
                bad += 1
    if bad:
        print('%d function(s) longer than %d lines: split them into named steps (CONTRIBUTING.md, "Style")' %
              (bad, limit))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
