#!/usr/bin/env python3
"""Count the library's public surface and the workspace's long functions.

Usage (from the repository root):

    python3 tools/surface.py            # both reports
    python3 tools/surface.py --api      # the public surface only
    python3 tools/surface.py --lines    # the long functions only
    python3 tools/surface.py --api --list   # and name every item and method

Report 1, the public surface of the library crate `crates/stagger`, all
features on. It runs

    cargo +nightly rustdoc -p stagger --all-features --lib -- \
        -Z unstable-options --output-format json

(pass `--json FILE` to read an existing `target/doc/stagger.json` instead)
and walks the JSON from the crate root:

* an item is *public* when a user can name it by a path: the crate root,
  every `pub mod` under it, and every `pub use` (a re-export is followed to
  the item it names; a glob re-export to every item of its module). An item
  re-exported at two paths counts once.
* **items** are the public structs, enums, unions, traits, functions, type
  aliases, constants, statics and macros. Modules are not items: they are
  counted on their own line (the public modules a user can `use`), as are
  re-exported foreign crates (`pub use ::reqwest as client`), which are
  neither. Enum variants, fields, associated types and constants are parts
  of their item, not items.
* **methods** are the functions a user can call on a public item: every
  function of an inherent `impl` of a public struct, enum or union
  (associated functions such as `new` included; rustdoc already dropped the
  ones that are not `pub`), plus every function a public trait declares
  (required and provided, counted once on the trait, not again for each
  type implementing it). Functions of trait impls (`Clone`, `Display`,
  tower's `Service`, ...) are not counted: they are the trait's surface, not
  stagger's.

Report 2, the long functions of the crates named by `--crates` (default:
every crate under `crates/`). A function's length is the number of lines
from the line of its `fn` keyword to the line of its closing brace, both
included; a declaration without a body (`fn f();` in a trait) has none. Only
non-test code counts: files under `src/` (not `tests/`, `benches/`,
`examples/`), without any item marked `#[cfg(test)]` (or a `cfg` naming
`test` other than `not(test)`) or `#[test]`, and without files declared by
such a `mod x;`. The scan knows Rust's comments, strings, raw strings and
char literals, so a brace inside one does not count. Per crate it prints how
many functions are over 100 and over 80 lines and lists them, longest first.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ITEM_KINDS = {
    "struct",
    "enum",
    "union",
    "trait",
    "function",
    "type_alias",
    "constant",
    "static",
    "macro",
    "proc_macro",
    "trait_alias",
}


def rustdoc_json(path):
    if path is None:
        cmd = [
            "cargo", "+nightly", "rustdoc", "-p", "stagger", "--all-features", "--lib",
            "--", "-Z", "unstable-options", "--output-format", "json",
        ]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        path = os.path.join(target, "doc", "stagger.json")
    with open(path) as f:
        return json.load(f)


def kind(item):
    return next(iter(item["inner"]))


def public_surface(doc):
    """(items, modules, foreign, methods): dicts id -> path, path, path."""
    index = doc["index"]
    items, modules, foreign, methods = {}, {}, {}, {}

    def visit(item_id, path):
        key = str(item_id)
        item = index.get(key)
        if item is None:
            return
        k = kind(item)
        if k == "module":
            if key in modules:
                return
            modules[key] = path
            for child in item["inner"]["module"]["items"]:
                child_item = index.get(str(child))
                if child_item is None:
                    continue
                name = child_item.get("name") or ""
                visit(child, path + "::" + name if kind(child_item) != "use" else path)
        elif k == "use":
            use = item["inner"]["use"]
            target = use["id"]
            if target is None or str(target) not in index:
                foreign[path + "::" + use["name"]] = use["source"]
                return
            if use["is_glob"]:
                target_item = index[str(target)]
                for child in target_item["inner"]["module"]["items"]:
                    child_item = index.get(str(child))
                    if child_item is not None:
                        visit(child, path + "::" + (child_item.get("name") or ""))
            else:
                target_item = index[str(target)]
                if kind(target_item) == "module":
                    visit(target, path + "::" + use["name"])
                else:
                    visit(target, path + "::" + use["name"])
        elif k in ITEM_KINDS:
            if key in items:
                return
            items[key] = path
            count_methods(item, k, path)

    def count_methods(item, k, path):
        if k in ("struct", "enum", "union"):
            for impl_id in item["inner"][k]["impls"]:
                impl = index.get(str(impl_id))
                if impl is None:
                    continue
                body = impl["inner"]["impl"]
                if body["trait"] is not None or body.get("is_synthetic") or body.get("blanket_impl"):
                    continue
                for fn_id in body["items"]:
                    fn = index.get(str(fn_id))
                    if fn is not None and kind(fn) == "function":
                        methods.setdefault(str(fn_id), path + "::" + fn["name"])
        elif k == "trait":
            for fn_id in item["inner"]["trait"]["items"]:
                fn = index.get(str(fn_id))
                if fn is not None and kind(fn) == "function":
                    methods.setdefault(str(fn_id), path + "::" + fn["name"])

    root = index[str(doc["root"])]
    visit(doc["root"], root["name"])
    return items, modules, foreign, methods


def report_api(args):
    doc = rustdoc_json(args.json)
    items, modules, foreign, methods = public_surface(doc)
    # The crate root is a module a user names, but not one of "the public
    # modules": say it apart.
    print("stagger public surface (all features), rustdoc JSON format", doc["format_version"])
    print(f"  public items:    {len(items)}")
    print(f"  public methods:  {len(methods)}")
    print(f"  public modules:  {len(modules) - 1} (not counting the crate root)")
    print(f"  foreign re-exports: {len(foreign)}")
    if args.list:
        by_kind = {}
        for key, path in items.items():
            by_kind.setdefault(kind(doc["index"][key]), []).append(path)
        for k in sorted(by_kind):
            print(f"\n  {k} ({len(by_kind[k])})")
            for path in sorted(by_kind[k]):
                print("    " + path)
        print("\n  modules")
        for path in sorted(modules.values()):
            print("    " + path)
        for path, source in sorted(foreign.items()):
            print(f"    {path} (= {source})")
        print(f"\n  methods ({len(methods)})")
        for path in sorted(methods.values()):
            print("    " + path)


# ---------------------------------------------------------------- lines

def tokens(text):
    """Yield (kind, value, line) for the parts of Rust source the length
    count needs: identifiers, `#`, brackets, `;`, `!`. Comments, strings and
    char literals are skipped (their newlines still counted)."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        line += 1
                    i += 1
        elif re.match(r'(b|c)?r#*"', text[i:i + 260]):
            m = re.match(r'(b|c)?r(#*)"', text[i:])
            end = text.find('"' + m.group(2), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(2))
            line += text.count("\n", i, end)
            i = end
        elif c == '"' or (c in "bc" and text.startswith('"', i + 1)):
            i += 1 if c == '"' else 2
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                if i < n and text[i] == "\n":
                    line += 1
                i += 1
            i += 1
        elif c == "'" or (c == "b" and text.startswith("'", i + 1)):
            start = i + (1 if c == "'" else 2)
            m = re.match(r"(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]+\}|.)|[^\\\n])'", text[start:start + 12])
            if m:
                i = start + m.end()
            else:  # a lifetime or label
                i = start
        elif c.isalpha() or c == "_":
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i:])
            yield ("ident", m.group(0), line)
            i += m.end()
        elif c.isdigit():
            m = re.match(r"[0-9][0-9A-Za-z_]*(\.[0-9][0-9A-Za-z_]*)?", text[i:])
            i += m.end()
        else:
            yield ("punct", c, line)
            i += 1


def is_test_cfg(attr):
    attr = re.sub(r"\s+", "", attr)
    if attr == "test":
        return True
    if not attr.startswith("cfg("):
        return False
    inner = attr.replace("not(test)", "")
    return re.search(r"\btest\b", inner) is not None


def scan_file(text):
    """(functions, test_mods): functions as (name, first, last) over the
    non-test code; test_mods the names declared `#[cfg(test)] mod x;`."""
    toks = list(tokens(text))
    functions, test_mods = [], []
    i, n = 0, len(toks)
    pending_test = False

    def skip_item(j):
        """From token j (inside an item), return the index after its end:
        the matching `}` of its first top-level `{`, or its `;`."""
        depth = 0
        while j < n:
            k, v, _ = toks[j]
            if k == "punct" and v in "([":
                depth += 1
            elif k == "punct" and v in ")]":
                depth -= 1
            elif k == "punct" and v == ";" and depth == 0:
                return j + 1
            elif k == "punct" and v == "{" and depth == 0:
                return match_brace(j) + 1
            j += 1
        return n

    def match_brace(j):
        depth = 0
        while j < n:
            k, v, _ = toks[j]
            if k == "punct" and v == "{":
                depth += 1
            elif k == "punct" and v == "}":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        return n - 1

    while i < n:
        k, v, line = toks[i]
        if k == "punct" and v == "#" and i + 1 < n and toks[i + 1][1] in ("[", "!"):
            # An attribute: read it to its closing bracket.
            j = i + 1 + (toks[i + 1][1] == "!")
            depth, parts = 0, []
            while j < n:
                kk, vv, _ = toks[j]
                if vv == "[":
                    depth += 1
                elif vv == "]":
                    depth -= 1
                    if depth == 0:
                        break
                if depth >= 1 and not (depth == 1 and vv == "["):
                    parts.append(vv)
                j += 1
            if toks[i + 1][1] != "!" and is_test_cfg(" ".join(parts).replace(" ", "")):
                pending_test = True
            i = j + 1
            continue
        if pending_test:
            pending_test = False
            # `mod x;` declared for tests only: its file is test code.
            j = i
            while j < n and toks[j][1] in ("pub", "crate", "(", ")", "super", "in", "self"):
                j += 1
            if j + 2 < n and toks[j][1] == "mod" and toks[j + 2][1] == ";":
                test_mods.append(toks[j + 1][1])
            i = skip_item(i)
            continue
        if k == "ident" and v == "fn" and i + 1 < n and toks[i + 1][0] == "ident":
            name = toks[i + 1][1]
            j, depth = i + 2, 0
            while j < n:
                kk, vv, _ = toks[j]
                if kk == "punct" and vv in "([":
                    depth += 1
                elif kk == "punct" and vv in ")]":
                    depth -= 1
                elif kk == "punct" and vv == ";" and depth == 0:
                    break
                elif kk == "punct" and vv == "{" and depth == 0:
                    end = match_brace(j)
                    functions.append((name, line, toks[end][2]))
                    break
                j += 1
            i += 2  # nested functions are scanned too
            continue
        i += 1
    return functions, test_mods


def crate_functions(crate_dir):
    src = os.path.join(crate_dir, "src")
    excluded = set()
    found = []
    files = []
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(".rs"):
                files.append(os.path.join(dirpath, name))
    scanned = {}
    for path in sorted(files):
        with open(path, encoding="utf-8") as f:
            scanned[path] = scan_file(f.read())
    for path, (_, test_mods) in scanned.items():
        base = os.path.dirname(path)
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem not in ("mod", "lib", "main"):
            base = os.path.join(base, stem)
        for m in test_mods:
            excluded.add(os.path.join(base, m + ".rs"))
            excluded.add(os.path.join(base, m, "mod.rs"))
            excluded.add(os.path.join(base, m))
    for path, (functions, _) in scanned.items():
        if path in excluded or any(path.startswith(e + os.sep) for e in excluded):
            continue
        rel = os.path.relpath(path, ROOT)
        for name, first, last in functions:
            found.append((last - first + 1, rel, first, name))
    return found


def report_lines(args):
    crates_dir = os.path.join(ROOT, "crates")
    names = args.crates or sorted(
        d for d in os.listdir(crates_dir) if os.path.isfile(os.path.join(crates_dir, d, "Cargo.toml"))
    )
    print("long functions (non-test code; lines from `fn` to its closing brace)")
    for crate in names:
        found = sorted(crate_functions(os.path.join(crates_dir, crate)), reverse=True)
        over80 = [f for f in found if f[0] > 80]
        over100 = [f for f in over80 if f[0] > 100]
        print(f"  {crate}: {len(over100)} over 100, {len(over80)} over 80 ({len(found)} functions)")
        for length, rel, first, name in over80:
            print(f"    {length:4d}  {rel}:{first}  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", action="store_true", help="the public surface only")
    parser.add_argument("--lines", action="store_true", help="the long functions only")
    parser.add_argument("--list", action="store_true", help="name every public item and method")
    parser.add_argument("--json", help="read this rustdoc JSON instead of building it")
    parser.add_argument("--crates", nargs="*", help="crate folder names under crates/ for --lines")
    args = parser.parse_args()
    both = not args.api and not args.lines
    if args.api or both:
        report_api(args)
    if args.lines or both:
        if args.api or both:
            print()
        report_lines(args)


if __name__ == "__main__":
    main()
