"""The index: facts for every file of a target, computed once per file content and cached.

A run lists the target's files with a cheap stamp each (size + mtime, or the git blob id) and
compares them with the target's *manifest*. Unchanged files cost a stat; changed ones are read,
hashed the way git hashes blobs, and extracted in parallel across cores unless the facts of that
content are already in the content-addressed store (two SGLang versions share most files). Facts
are loaded lazily: a warm run that only needs the cached graph never opens them.

A file that cannot be read, is binary, huge, not UTF-8 or does not parse becomes a diagnostic,
never a crash.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

from .cache import cache_dir, load_entry, load_pickle, save_entry, write_behind
from .facts import FileFacts, from_plain, to_plain
from .pyfacts import extract_plain, internal_error, module_name
from .sources import MAX_BYTES, DirSource, file_kind, read_under

# Registrations of native ops in C++/CUDA: m.def("name(...)" / m.def("name", &fn) / TORCH_LIBRARY(ns, m)
_CPP_DEF = re.compile(r"""\b(?:m|ops|lib)\s*\.\s*(?:def|impl)\s*\(\s*"([A-Za-z_][A-Za-z0-9_.]*)""")
_CPP_LIB = re.compile(r"""\bTORCH_LIBRARY(?:_FRAGMENT|_EXPAND|_IMPL)?\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)""")
_PARALLEL_MIN = 64  # below this many files to extract, one process is faster than a pool


class FileMeta(NamedTuple):
    """What the manifest keeps of one file: enough to list, diagnose and find its facts."""

    stamp: tuple
    digest: str
    kind: str
    module: str
    error: Optional[str]
    lines: int


def blob_digest(data: bytes) -> str:
    """The id git gives these bytes as a blob, so disk and git targets share cached facts."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


from .cache import code_fingerprint

# Facts made by another version of the extractor are not trusted: the header names the code.
_STORE_FORMAT = f"recon-facts-{code_fingerprint('facts', 'pyfacts', 'indexer')}\n".encode()


def _facts_path(digest: str) -> Path:
    return cache_dir() / "facts" / digest[:2] / f"{digest}.bin"


def load_facts_blob(digest: str) -> Optional[bytes]:
    return _read_blob(_facts_path(digest))


def _read_blob(path) -> Optional[bytes]:
    data = load_entry(path)  # None unless signed with this user's key: marshal is not safe on forged data
    if data is None or data[: len(_STORE_FORMAT)] != _STORE_FORMAT:
        return None
    return bytes(data[len(_STORE_FORMAT) :])


def load_facts(digest: str) -> Optional[FileFacts]:
    """Facts stored for this content, or None when missing or unreadable (then re-extracted)."""
    blob = load_facts_blob(digest)
    if blob is None:
        return None
    try:
        return from_plain(marshal.loads(blob))
    except (ValueError, EOFError, TypeError):
        return None


def store_facts(facts: FileFacts) -> bytes:
    blob = marshal.dumps(to_plain(facts))
    save_entry(_facts_path(facts.digest), _STORE_FORMAT + blob)  # a read-only or full cache costs speed, not results
    return blob


def _store_job(digest: str, blob: bytes, facts_dir: Optional[str] = None) -> tuple:
    # a plain string path: made a Path by the writer, behind the answer
    path = _facts_path(digest) if facts_dir is None else f"{facts_dir}/{digest[:2]}/{digest}.bin"
    return path, _STORE_FORMAT + blob


@dataclass
class Index:
    files: dict  # relpath -> FileMeta, sorted by path
    package_prefix: str
    stats: dict = field(default_factory=dict)
    _loaded: dict = field(default_factory=dict, repr=False)
    _plain: dict = field(default_factory=dict, repr=False)  # relpath -> plain facts not yet made records

    @property
    def diagnostics(self) -> list[tuple[str, str]]:
        return sorted((p, m.error) for p, m in self.files.items() if m.error)

    def facts(self, relpath: str) -> Optional[FileFacts]:
        """Facts of one file, loaded from the store on first use."""
        f = self._loaded.get(relpath)
        if f is not None:
            return f
        plain = self._plain.pop(relpath, None)
        if plain is not None:  # extracted in this run
            f = self._loaded[relpath] = from_plain(plain)
            return f
        meta = self.files.get(relpath)
        if meta is None:
            return None
        blob = load_facts_blob(meta.digest) if meta.digest else None
        try:
            f = _hydrate(relpath, blob, self.package_prefix) if blob is not None else None
        except (ValueError, EOFError, TypeError):  # a corrupt store entry: extract again
            f = None
        if f is None:
            f = _reindex_one(self, relpath, meta)
        self._loaded[relpath] = f
        return f

    def release_facts(self) -> None:
        """Forget the records made so far; each is read from the store again on its next use. For a
        process that keeps a loaded tree it is not using now (hundreds of MB on a large release):
        a record read again equals the one dropped."""
        self._loaded.clear()

    def all_facts(self) -> Iterator[FileFacts]:
        for p in self.files:
            f = self.facts(p)
            if f is not None:
                yield f

    def py_facts(self) -> Iterator[FileFacts]:
        for p, m in self.files.items():
            if m.kind == "py" and m.error is None:
                f = self.facts(p)
                if f is not None:
                    yield f

    def path_of_module(self, module: str) -> Optional[str]:
        for p, m in self.files.items():
            if m.module == module and m.kind == "py":
                return p
        return None


def _reindex_one(index: Index, relpath: str, meta: FileMeta) -> FileFacts:
    """A store entry went missing or corrupt: extract again from the source (set by build_index)."""
    source = index.stats.get("_source")
    if source is None:
        return FileFacts(relpath, meta.module, meta.kind, meta.digest, meta.lines, "facts missing from the cache")
    try:
        data = source.read(relpath)
    except OSError as e:
        return FileFacts(relpath, meta.module, meta.kind, meta.digest, meta.lines, f"unreadable: {e}")
    facts = index_bytes(relpath, data, index.package_prefix)
    store_facts(facts)
    return facts


def _module_for(relpath: str, prefix: str) -> tuple[str, bool]:
    inner = relpath[len(prefix) + 1 :] if prefix and relpath.startswith(prefix + "/") else relpath
    return module_name(inner)


def _line_counter(text: str) -> Callable[[int], int]:
    """Line of an offset, for offsets met in increasing order: counting from the previous one
    keeps a file with many matches linear (counting from the start each time was quadratic: a
    hang on a few MB of registrations)."""
    state = [0, 1]  # offset counted up to, its line

    def line(pos: int) -> int:
        state[1] += text.count("\n", state[0], pos)
        state[0] = pos
        return state[1]

    return line


def _cpp_facts(relpath: str, text: str, digest: str, lines: int) -> FileFacts:
    libs: dict[str, int] = {}
    line = _line_counter(text)
    for m in _CPP_LIB.finditer(text):
        libs.setdefault(m.group(1), line(m.start()))
    namespace = next(iter(libs), "")
    ops = []
    line = _line_counter(text)
    for m in _CPP_DEF.finditer(text):
        name = m.group(1)
        ops.append((f"{namespace}.{name}" if namespace and "." not in name else name, line(m.start())))
    return FileFacts(relpath, "", "cpp", digest, lines, None, ops=tuple(ops))


# PEP 263: a coding declaration on line 1 or 2 (the only way a .py file may be other than UTF-8)
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _undeclared_non_utf8(data: bytes) -> Optional[str]:
    """Why Python would refuse to import this source for its encoding, else None."""
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        if any(_CODING.match(line) for line in data.split(b"\n", 2)[:2]):
            return None  # declared: ast.parse honours the declaration
        line = data.count(b"\n", 0, e.start) + 1
        return f"not UTF-8 (byte 0x{data[e.start]:02x} on line {line}) and no coding line: Python cannot import it"


def index_bytes(relpath: str, data: bytes, prefix: str, digest: Optional[str] = None) -> FileFacts:
    """Facts of one file from its bytes."""
    return from_plain(index_plain(relpath, data, prefix, digest))


def index_plain(relpath: str, data: bytes, prefix: str, digest: Optional[str] = None) -> tuple:
    """:func:`index_bytes` as nested plain tuples (:func:`recon.facts.to_plain`).

    Never raises: a file recon cannot analyze, even through a bug of its own, is a diagnostic
    (one odd file in a pull request must not end a CI run)."""
    digest = digest or blob_digest(data)
    try:
        return _index_plain(relpath, data, prefix, digest)
    except Exception as e:  # noqa: BLE001
        kind = file_kind(relpath)
        module = _module_for(relpath, prefix)[0] if kind == "py" else ""
        return to_plain(FileFacts(relpath, module, kind, digest, data.count(b"\n") + 1, internal_error("indexing", e)))


def _index_plain(relpath: str, data: bytes, prefix: str, digest: str) -> tuple:
    kind = file_kind(relpath)
    lines = data.count(b"\n") + 1
    module = _module_for(relpath, prefix)[0] if kind == "py" else ""
    if len(data) > MAX_BYTES:
        return to_plain(FileFacts(relpath, module, kind, digest, lines, f"skipped: larger than the {MAX_BYTES // 1048576} MiB limit"))
    if b"\0" in data[:8192]:
        return to_plain(FileFacts(relpath, module, kind, digest, lines, "skipped: binary content"))
    if kind == "py":
        module, is_pkg = _module_for(relpath, prefix)
        bad = _undeclared_non_utf8(data)
        if bad:  # ast.parse lets some of these through (in comments); Python's import does not
            return to_plain(FileFacts(relpath, module, kind, digest, lines, bad))
        return extract_plain(relpath, module, is_pkg, data, digest)
    text = data.decode("utf-8", "replace")
    if kind == "json":
        try:
            json.loads(text)
        except ValueError as e:
            return to_plain(FileFacts(relpath, "", "json", digest, lines, f"invalid JSON: {e}"))
        except RecursionError:
            return to_plain(FileFacts(relpath, "", "json", digest, lines, "invalid JSON: too deeply nested"))
        return to_plain(FileFacts(relpath, "", "json", digest, lines, None))
    return to_plain(_cpp_facts(relpath, text, digest, lines))


def _from_bytes(relpath: str, data: bytes, prefix: str, digest: Optional[str], facts_dir: str) -> tuple:
    """(relpath, marshalled plain facts, digest, new?): bytes cross process boundaries far cheaper
    than records. New facts are stored by the caller, behind the answer (one writer, not one per
    worker per file)."""
    digest = digest or blob_digest(data)
    blob = _read_blob(os.path.join(facts_dir, digest[:2], f"{digest}.bin"))
    if blob is not None:
        return relpath, blob, digest, False
    plain = index_plain(relpath, data, prefix, digest)
    return relpath, marshal.dumps(plain), plain[3], bool(plain[3])


def _index_path(args) -> tuple:
    root, relpath, prefix, facts_dir, bound = args
    try:  # the file checked is the file read: no link followed out, never a pipe (recon.safepath)
        data = read_under(root, relpath, bound, MAX_BYTES + 1)
    except OSError as e:
        err = FileFacts(relpath, "", file_kind(relpath), "", 0, f"unreadable: {e.strerror or e}")
        return relpath, marshal.dumps(to_plain(err)), "", False
    return _from_bytes(relpath, data, prefix, None, facts_dir)


def _index_blob(args) -> tuple:
    relpath, data, prefix, digest, facts_dir = args
    return _from_bytes(relpath, data, prefix, digest, facts_dir)


def _hydrate(relpath: str, blob: bytes, prefix: str) -> FileFacts:
    f = from_plain(marshal.loads(blob))
    if f.path != relpath:  # the same content stored under another path (another version, a copy)
        f = f._replace(path=relpath, module=_module_for(relpath, prefix)[0] if f.kind == "py" else "")
    return f


def _manifest_path(target_key: str) -> Path:
    return cache_dir() / "index" / f"{target_key}.{code_fingerprint('facts', 'pyfacts', 'indexer')}.manifest.pkl"


def build_index(
    target,
    progress: Optional[Callable[[int, int], None]] = None,
    workers: Optional[int] = None,
    on_facts: Optional[Callable[[FileFacts], None]] = None,
    deferred: Optional[list] = None,
) -> Index:
    """The index of ``target``: manifest entries for unchanged files, fresh facts for the rest.

    ``on_facts`` sees each freshly extracted file as it arrives, as plain tuples in the layout of
    :class:`FileFacts` (see :func:`recon.facts.to_plain`) (the graph builder uses it to work
    while the extraction workers are still busy). With ``deferred``, new facts to store (and the
    manifest, last) are appended there for the caller to write with its own (one write-behind
    child for the whole run)."""
    source = target.source
    prefix = target.package_prefix
    store = _manifest_path(target.key)
    cached = load_pickle(store) or {}
    metas: dict[str, FileMeta] = {}
    todo: list[tuple[str, tuple]] = []
    for relpath, stamp in source.files():
        hit = cached.get(relpath)
        if hit is not None and hit.stamp == stamp:
            metas[relpath] = hit
        else:
            todo.append((relpath, stamp))
    # links the source would not follow (they leave the target root, or are broken): diagnostics
    # whose facts are the reason alone, so nothing downstream ever asks the source for their bytes
    refused = {p: to_plain(FileFacts(p, "", "link", "", 0, why)) for p, why in getattr(source, "refused", {}).items()}
    for p, f in refused.items():
        metas[p] = FileMeta(("link",), "", "link", "", f[5], 0)
    fresh: dict[str, tuple] = {}  # relpath -> plain facts (made records only when asked for)
    new_blobs: list = []
    if todo:
        facts_dir = str(cache_dir() / "facts")
        for relpath, blob, digest, new in _extract_many(source, [p for p, _ in todo], prefix, progress, workers):
            f = marshal.loads(blob)
            if f[0] != relpath:  # the same content stored under another path (another version, a copy)
                f = (relpath, _module_for(relpath, prefix)[0] if f[2] == "py" else "", *f[2:])
            fresh[relpath] = f
            if new:
                new_blobs.append(_store_job(digest, blob, facts_dir))
            if on_facts is not None:
                on_facts(f)
        for relpath, stamp in todo:
            f = fresh[relpath]  # FileFacts layout: path, module, kind, digest, lines, error, ...
            metas[relpath] = FileMeta(stamp, f[3], f[2], f[1], f[5], f[4])
    changed = bool(todo) or len(cached) != len(metas)
    ordered = {p: metas[p] for p in sorted(metas)}
    # The manifest goes to the same writer as the facts, after them: a run killed before its
    # writer is done leaves the old manifest, so the next run extracts those files again in
    # parallel, instead of trusting a manifest whose facts are missing (then re-extracted one by
    # one in the main process: slower than a cold run).
    jobs = new_blobs + ([(store, ordered)] if changed else [])
    if deferred is not None:
        deferred.extend(jobs)
    elif jobs:
        write_behind(jobs)
    index = Index(ordered, prefix, {"files": len(ordered), "extracted": len(todo), "reused": len(ordered) - len(todo)})
    index._plain.update(refused)
    index._plain.update(fresh)
    index.stats["_source"] = source
    index.stats["changed"] = sorted(fresh) + sorted(set(cached) - set(metas))
    return index


def _extract_many(source, todo: list[str], prefix: str, progress, workers: Optional[int]) -> Iterator[tuple]:
    """(relpath, marshalled plain facts, digest, new?) of every file in ``todo``, in order, each as
    soon as it is ready: the caller builds the graph while the workers are still extracting."""
    workers = workers or os.cpu_count() or 1
    facts_dir = str(cache_dir() / "facts")
    if isinstance(source, DirSource):
        yield from _run(_index_path, [(source.real_root, p, prefix, facts_dir, source.bound) for p in todo], workers, progress)
        return
    jobs = []
    for p in todo:
        try:
            jobs.append((p, source.read(p), prefix, None, facts_dir))
        except Exception:  # a broken object in a repository
            yield p, marshal.dumps(to_plain(FileFacts(p, "", file_kind(p), "", 0, "unreadable git object"))), "", False
    yield from _run(_index_blob, jobs, workers, progress)


def _run(fn, jobs: list, workers: int, progress) -> Iterator[tuple]:
    total = len(jobs)
    done = 0
    if workers > 1 and total >= _PARALLEL_MIN:
        chunk = max(4, total // (workers * 96))  # small: little idle time once the last chunk is out
        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                for facts in pool.map(fn, jobs, chunksize=chunk):
                    done += 1
                    if progress and (done % 50 == 1 or done == total):
                        progress(done, total)
                    yield facts
        except (OSError, RuntimeError):  # no process pool here (sandbox, frozen app): the rest in this one
            pass
    for job in jobs[done:]:  # below this many files one process is faster than a pool
        done += 1
        yield fn(job)
        if progress and (done % 50 == 1 or done == total):
            progress(done, total)
