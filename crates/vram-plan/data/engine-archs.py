#!/usr/bin/env python3
"""Writes engine-archs.tsv: for each architecture string vLLM or SGLang can load, the first
release whose model registry has it (and the last, when a later release dropped it).

    python3 engine-archs.py fetch SRC   # the registry's source files of every release, from PyPI
    python3 engine-archs.py table SRC > engine-archs.tsv

Releases read: every final release (post releases included, release candidates not) of vLLM
0.5.0 to 0.26.x and SGLang 0.4.0 to 0.5.x on PyPI (`RANGES`; `table` reads only those); each release's sdist, or its x86_64 wheel
where PyPI has no sdist (vLLM 0.15.x; SGLang from 0.5.11), read by HTTP range requests.

- vLLM: the keys of `_VLLM_MODELS` (0.6.3+ `vllm/model_executor/models/registry.py`; `_MODELS`
  in 0.5.x-0.6.2 `vllm/model_executor/models/__init__.py`), the dict `ModelRegistry` is built
  from, with its `**` parts resolved.
- SGLang: `sglang/srt/models/registry.py` `import_model_classes` registers `entry.__name__` of
  each module's `EntryClass` (one class or a list) in `sglang/srt/models/*.py`.

Each release's refusal message (`_raise_for_unsupported`, `get_model_architecture`) and whether
it falls back to a Transformers backend for an architecture its registry lacks are recorded on
its `release` line, read from the same files; so is each refusal a vLLM release words for an
architecture it names (`_PREVIOUSLY_SUPPORTED_MODELS`: "was supported in vLLM until"; from 0.19
`_OOT_SUPPORTED_MODELS`: "not supported in-tree anymore", with the plugin's address), on a
`dropped` line from the first release that words it so.
"""
import ast, io, json, os, re, sys, tarfile, urllib.request, zipfile

RANGES = {"vllm": ((0, 5, 0), (0, 27)), "sglang": ((0, 4, 0), (0, 6))}
WANT = re.compile(r"(^|/)((vllm|sglang)/(model_executor/models/(registry|__init__)\.py"
                  r"|model_executor/model_loader(\.py|/utils\.py)|srt/models/[^/]+\.py"
                  r"|srt/model_loader/utils\.py))$")


def key(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def final(v):
    return not re.search(r"[a-z]", v.replace("post", ""))


class _Range(io.RawIOBase):
    """A remote file read by HTTP range requests (a wheel's zip directory is at its end)."""

    def __init__(s, url, size):
        s.url, s.size, s.pos = url, size, 0

    def seekable(s):
        return True

    def readable(s):
        return True

    def tell(s):
        return s.pos

    def seek(s, o, w=0):
        s.pos = o if w == 0 else (s.pos + o if w == 1 else s.size + o)
        return s.pos

    def readinto(s, b):
        n = min(len(b), s.size - s.pos)
        if n <= 0:
            return 0
        r = urllib.request.Request(s.url, headers={"Range": f"bytes={s.pos}-{s.pos + n - 1}"})
        x = urllib.request.urlopen(r).read()
        b[: len(x)] = x
        s.pos += len(x)
        return len(x)


def fetch(src):
    for pkg, (lo, hi) in RANGES.items():
        req = urllib.request.Request(f"https://pypi.org/simple/{pkg}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        index = json.load(urllib.request.urlopen(req))
        for v in index["versions"]:
            if not (final(v) and lo <= key(v) < hi):
                continue
            out = f"{src}/{pkg}-{v}"
            if os.path.exists(f"{out}/.source"):
                continue
            files = [f for f in index["files"] if re.match(rf"{pkg}-{re.escape(v)}[-.]", f["filename"])]
            sdist = [f for f in files if f["filename"] == f"{pkg}-{v}.tar.gz"]
            wheel = [f for f in files if f["filename"].endswith(("x86_64.whl", "none-any.whl"))]
            os.makedirs(out, exist_ok=True)

            def save(name, data):
                p = f"{out}/{WANT.search(name).group(2)}"
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "wb").write(data)

            if sdist:
                with urllib.request.urlopen(sdist[0]["url"]) as r, tarfile.open(fileobj=r, mode="r|gz") as t:
                    for m in t:
                        if m.isfile() and WANT.search(m.name):
                            save(m.name, t.extractfile(m).read())
                used = sdist[0]["filename"]
            elif wheel:
                z = zipfile.ZipFile(io.BufferedReader(_Range(wheel[0]["url"], wheel[0]["size"]), 1 << 20))
                for name in z.namelist():
                    if WANT.search(name):
                        save(name, z.read(name))
                used = wheel[0]["filename"]
            else:
                print(f"{pkg} {v}: no sdist or wheel", file=sys.stderr)
                continue
            open(f"{out}/.source", "w").write(used + "\n")
            print(pkg, v, used, file=sys.stderr)


def vllm_archs(root):
    path = f"{root}/vllm/model_executor/models/registry.py"
    if not os.path.exists(path):
        path = f"{root}/vllm/model_executor/models/__init__.py"
    tree = ast.parse(open(path).read())
    dicts = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Dict):
            dicts[target.id] = node.value

    top = "_VLLM_MODELS" if "_VLLM_MODELS" in dicts else "_MODELS"
    parts = {v.id for k, v in zip(dicts[top].keys, dicts[top].values) if k is None}

    def keys(name):
        out = set()
        for k, v in zip(dicts[name].keys, dicts[name].values):
            if k is None and isinstance(v, ast.DictComp):
                # `**{k: ... for k, ... in _TEXT_GENERATION_MODELS.items() if ...}` (0.6.4's
                # embedding models): a subset of a dict that is itself a part of the registry.
                it = v.generators[0].iter.func.value.id
                assert it in parts, f"{path}: {it} is not a part of {top}"
            elif k is None:
                out |= keys(v.id)
            else:
                out.add(ast.literal_eval(k))
        return out

    text = open(path).read()
    fallback = "_try_resolve_transformers" in text or "TransformersModel" in text or "TransformersForCausalLM" in text
    # The architectures the release refuses by name: `_PREVIOUSLY_SUPPORTED_MODELS` (the last
    # release that had it) and, from 0.19, `_OOT_SUPPORTED_MODELS` (the plugin that has it now),
    # each with its refusal rendered for that architecture.
    dropped = {}
    for name, marker in (("_PREVIOUSLY_SUPPORTED_MODELS", "not supported anymore"),
                         ("_OOT_SUPPORTED_MODELS", "not supported in-tree anymore")):
        if name in dicts:
            d = dicts[name]
            render = refusal_words(root, marker)
            for k, v in zip(d.keys, d.values):
                a = ast.literal_eval(k)
                dropped[a] = render(a, ast.literal_eval(v))
    return keys(top), fallback, read_message(root, "vllm"), dropped


def refusal_words(root, marker):
    """The refusal whose f-string has `marker` (registry.py, or model_loader/utils.py at
    0.10.0), rendered for one architecture and the value its dict gives it (the last version
    that had it, or the plugin's address)."""
    for f in ("models/registry.py", "model_loader/utils.py"):
        tree = ast.parse(open(f"{root}/vllm/model_executor/{f}").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and marker in ast.unparse(node):
                def render(arch, value, node=node):
                    out = ""
                    for part in node.values:
                        if isinstance(part, ast.Constant):
                            out += part.value
                        else:
                            name = ast.unparse(part.value)
                            out += value if ("version" in name or "url" in name) else arch
                    return out
                return render
    raise SystemExit(f"{root}: an architecture list without its refusal ('{marker}')")


def sglang_archs(root):
    out = set()
    models = f"{root}/sglang/srt/models"
    for f in sorted(os.listdir(models)):
        if not f.endswith(".py") or f == "registry.py":
            continue
        tree = ast.parse(open(f"{models}/{f}", encoding="utf-8-sig").read())
        alias = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.asname:
                        alias[a.asname] = a.name
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                v = node.value
                items = v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]
                for e in items:
                    if not isinstance(e, ast.Name):
                        raise SystemExit(f"{models}/{f}: EntryClass entry {ast.dump(e)} is not a name")
                    out.add(alias.get(e.id, e.id))
    utils = f"{root}/sglang/srt/model_loader/utils.py"
    fallback = os.path.exists(utils) and "resolve_transformers_arch" in open(utils).read()
    return out, fallback, read_message(root, "sglang"), {}


def read_message(root, pkg):
    """The refusal's fixed words, as the release writes them."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            text = open(f"{dirpath}/{f}").read()
            m = re.search(r'f"Model architectures \{architectures\} (are not supported for now\. )"', text)
            if m:
                return "Model architectures {architectures} " + m.group(1).strip()
    raise SystemExit(f"{root}: no 'are not supported for now' message")


def table(src):
    print("# Generated by engine-archs.py (python3 engine-archs.py table SRC); do not edit.")
    print("# release <engine> <version> <source file> <transformers fallback: yes/no> <refusal message>")
    print("# arch <engine> <architecture> <the releases that have it: first..last, - for the newest read; comma-separated where it left and came back>")
    print("# dropped <engine> <architecture> <first release that refuses it by name with these words (_PREVIOUSLY_SUPPORTED_MODELS, _OOT_SUPPORTED_MODELS); - where a release stops naming it> <the refusal>")
    for pkg, read in (("vllm", vllm_archs), ("sglang", sglang_archs)):
        lo, hi = RANGES[pkg]
        versions = sorted((d[len(pkg) + 1:] for d in os.listdir(src) if d.startswith(pkg + "-")
                           and os.path.exists(f"{src}/{d}/.source")
                           and lo <= key(d[len(pkg) + 1:]) < hi), key=key)
        has, dropped, said = {}, {}, {}
        for v in versions:
            archs, fallback, message, gone = read(f"{src}/{pkg}-{v}")
            source = open(f"{src}/{pkg}-{v}/.source").read().strip()
            print(f"release\t{pkg}\t{v}\t{source}\t{'yes' if fallback else 'no'}\t{message}")
            for a in archs:
                has.setdefault(a, []).append(v)
            # A new line where the words change (a later release's own wording, a move to a
            # plugin) or the release stops naming an architecture an earlier one named.
            for a in sorted(set(gone) | set(said)):
                words = gone.get(a, "-")
                if said.get(a, "-") != words:
                    dropped.setdefault(a, []).append((v, words))
                said[a] = words
        for a in sorted(has, key=lambda a: (key(has[a][0]), a)):
            runs, i = [], 0
            for j, v in enumerate(versions):
                if v in has[a] and (not runs or runs[-1][1] != versions[j - 1]):
                    runs.append([v, v])
                elif v in has[a]:
                    runs[-1][1] = v
            text = ",".join(f"{x}..{'-' if y == versions[-1] else y}" for x, y in runs)
            print(f"arch\t{pkg}\t{a}\t{text}")
        for a, changes in sorted(dropped.items()):
            for v, words in changes:
                print(f"dropped\t{pkg}\t{a}\t{v}\t{words}")


if __name__ == "__main__":
    {"fetch": fetch, "table": table}[sys.argv[1]](sys.argv[2])
