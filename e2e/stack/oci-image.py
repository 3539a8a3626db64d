#!/usr/bin/env python3
"""Build a one-layer OCI image layout tarball from host files, without a
container engine or a registry (python3 standard library only).

    oci-image.py --name docker.io/flashsale/api:dev --out api.tar \\
        --file target/release/api:/usr/local/bin/api [--file SRC[:DST]]... \\
        [--env KEY=VALUE]... [--workdir DIR] [--user USER] [--label K=V]... \\
        [--cmd ARG]... [--stamp FILE] [--no-ldd] -- /usr/local/bin/api [ARG...]

The arguments after `--` are the image's Entrypoint. Every ELF file added
brings the shared libraries `ldd` lists for it (and the dynamic loader), at the
paths ldd shows, so a glibc binary runs in the image. A directory SRC is added
recursively (symbolic links inside it stay links); a file SRC is added by
content. /tmp, a minimal /etc/passwd and /etc/group are added unless given.

The tarball (oci-layout, index.json annotated with io.containerd.image.name,
blobs: config, manifest, gzip layer) imports with `ctr images import`. Its
bytes depend only on the inputs (every timestamp is 0), so a rebuild of the
same files gives the same digest. With --stamp, a build whose inputs (paths,
sizes, modification times, options) match the stamp's is skipped. Prints the
manifest digest.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import re
import stat
import subprocess
import sys
import tarfile
import tempfile

EPOCH = "1970-01-01T00:00:00Z"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSWD = b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def die(msg):
    print(f"oci-image.py: {msg}", file=sys.stderr)
    sys.exit(1)


def go_arch():
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}.get(m, m)


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


LDD_LINE = re.compile(r"^\s*(?:(\S+)\s+=>\s+)?(\S+)?\s*(?:\(0x[0-9a-f]+\))?\s*$")


def shared_libraries(path):
    """The absolute paths ldd lists for PATH (none for a static binary)."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    out = r.stdout + r.stderr
    if "not a dynamic executable" in out or "statically linked" in out:
        return []
    if r.returncode != 0:
        die(f"ldd {path} failed: {out.strip()}")
    libs = []
    for line in r.stdout.splitlines():
        if "=> not found" in line:
            die(f"{path}: shared library {line.split()[0]} not found")
        m = LDD_LINE.match(line)
        if m and m.group(2) and m.group(2).startswith("/"):
            libs.append(m.group(2))
    return libs


class Entry:
    """One path in the image: a regular file from SRC, a directory, a
    symbolic link, or literal bytes."""

    def __init__(self, kind, mode, src=None, data=None, target=None):
        self.kind, self.mode, self.src, self.data, self.target = kind, mode, src, data, target


def collect(args):
    """dst path (no leading /) -> Entry, and the host files read."""
    entries = {}
    elves = []

    def add_file(src, dst):
        st = os.stat(src)  # follows links: the content is what counts
        if not stat.S_ISREG(st.st_mode):
            die(f"{src} is not a regular file")
        entries[dst] = Entry("file", stat.S_IMODE(st.st_mode), src=os.path.realpath(src))
        if not args.no_ldd and is_elf(src):
            elves.append(src)

    def add_tree(src, dst):
        entries[dst] = Entry("dir", stat.S_IMODE(os.stat(src).st_mode))
        for root, dirs, files in os.walk(src):
            dirs.sort()
            rel = os.path.relpath(root, src)
            base = dst if rel == "." else f"{dst}/{rel}"
            for name in dirs + sorted(files):
                p = os.path.join(root, name)
                d = f"{base}/{name}"
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    entries[d] = Entry("link", 0o777, target=os.readlink(p))
                elif stat.S_ISDIR(st.st_mode):
                    entries[d] = Entry("dir", stat.S_IMODE(st.st_mode))
                elif stat.S_ISREG(st.st_mode):
                    add_file(p, d)

    for spec in args.file:
        src, _, dst = spec.partition(":")
        dst = (dst or os.path.abspath(src)).strip("/")
        if not dst:
            die(f"--file {spec}: empty destination")
        if not os.path.exists(src):
            die(f"{src}: no such file or directory")
        if os.path.isdir(src):
            add_tree(src, dst)
        else:
            add_file(src, dst)

    for elf in elves:
        for lib in shared_libraries(elf):
            d = lib.strip("/")
            if d not in entries:
                entries[d] = Entry("file", stat.S_IMODE(os.stat(lib).st_mode), src=os.path.realpath(lib))

    entries.setdefault("tmp", Entry("dir", 0o1777))
    entries.setdefault("etc/passwd", Entry("data", 0o644, data=PASSWD))
    entries.setdefault("etc/group", Entry("data", 0o644, data=GROUP))

    # Every parent directory, explicitly: a tar without them still unpacks,
    # but with root-owned 0755 parents the result does not depend on umask.
    for dst in list(entries):
        parts = dst.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:i]), Entry("dir", 0o755))
    return entries


def input_key(args, entries):
    """A digest of everything the build reads: options and file metadata."""
    h = hashlib.sha256()
    h.update(json.dumps({k: v for k, v in vars(args).items() if k not in ("stamp", "out")}, sort_keys=True).encode())
    h.update(open(__file__, "rb").read())
    for dst in sorted(entries):
        e = entries[dst]
        h.update(f"\0{dst}\0{e.kind}\0{e.mode}\0{e.target}\0".encode())
        if e.src:
            st = os.stat(e.src)
            h.update(f"{e.src}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        if e.data:
            h.update(e.data)
    return h.hexdigest()


class HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes to `inner`."""

    def __init__(self, inner):
        self.inner, self.sha, self.size = inner, hashlib.sha256(), 0

    def writable(self):
        return True

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        self.inner.write(b)
        return len(b)


def tar_info(name, kind, mode, size=0, target=None):
    ti = tarfile.TarInfo(name)
    ti.mode, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = mode, 0, 0, 0, "", ""
    if kind == "dir":
        ti.type = tarfile.DIRTYPE
    elif kind == "link":
        ti.type, ti.linkname = tarfile.SYMTYPE, target
    else:
        ti.size = size
    return ti


def write_layer(entries, out, level):
    """The gzip layer into file `out`: (diff_id, digest, size)."""
    compressed = HashingWriter(out)
    gz = gzip.GzipFile(filename="", mode="wb", fileobj=compressed, compresslevel=level, mtime=0)
    raw = HashingWriter(gz)
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for dst in sorted(entries):
            e = entries[dst]
            if e.kind == "file":
                with open(e.src, "rb") as f:
                    tar.addfile(tar_info(dst, "file", e.mode, os.fstat(f.fileno()).st_size), f)
            elif e.kind == "data":
                tar.addfile(tar_info(dst, "file", e.mode, len(e.data)), io.BytesIO(e.data))
            else:
                tar.addfile(tar_info(dst, e.kind, e.mode, target=e.target))
    gz.close()
    return "sha256:" + raw.sha.hexdigest(), "sha256:" + compressed.sha.hexdigest(), compressed.size


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def build(args, entries):
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryFile(dir=out_dir) as layer:
        diff_id, layer_digest, layer_size = write_layer(entries, layer, args.compress_level)

        repo, _, tag = args.name.rpartition(":")
        if "/" in tag or not repo:
            die(f"--name {args.name}: give a tag, as in docker.io/flashsale/NAME:TAG")
        cfg = {"Env": [DEFAULT_PATH] + args.env, "WorkingDir": args.workdir}
        if args.entrypoint:
            cfg["Entrypoint"] = args.entrypoint
        if args.cmd:
            cfg["Cmd"] = args.cmd
        if args.user:
            cfg["User"] = args.user
        if args.label:
            cfg["Labels"] = dict(kv.split("=", 1) for kv in args.label)
        config = canonical({
            "created": EPOCH,
            "architecture": go_arch(),
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": EPOCH, "created_by": "e2e/stack/oci-image.py"}],
        })
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        manifest = canonical({
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": MT_LAYER, "digest": layer_digest, "size": layer_size}],
        })
        manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        index = canonical({
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [{
                "mediaType": MT_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest),
                "platform": {"architecture": go_arch(), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": args.name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }],
        })

        tmp = args.out + ".tmp"
        layer.seek(0)
        with tarfile.open(tmp, mode="w", format=tarfile.GNU_FORMAT) as tar:
            def add(name, data=None, fileobj=None, size=None, kind="file"):
                ti = tar_info(name, kind, 0o755 if kind == "dir" else 0o644, size if size is not None else len(data or b""))
                tar.addfile(ti, fileobj if fileobj else (io.BytesIO(data) if kind == "file" else None))

            add("blobs", kind="dir")
            add("blobs/sha256", kind="dir")
            add("blobs/sha256/" + config_digest[7:], config)
            add("blobs/sha256/" + layer_digest[7:], fileobj=layer, size=layer_size)
            add("blobs/sha256/" + manifest_digest[7:], manifest)
            add("index.json", index)
            add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        os.replace(tmp, args.out)
    return manifest_digest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="full image reference, docker.io/flashsale/NAME:TAG")
    p.add_argument("--out", required=True, help="the OCI layout tarball to write")
    p.add_argument("--file", action="append", default=[], metavar="SRC[:DST]", help="host file or directory, at DST (default: the same path)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workdir", default="/")
    p.add_argument("--user", default="")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--cmd", action="append", default=[], metavar="ARG", help="the image's Cmd, one argument per --cmd")
    p.add_argument("--no-ldd", action="store_true", help="do not add the shared libraries of ELF files")
    p.add_argument("--compress-level", type=int, default=1, help="gzip level of the layer (default 1: fast)")
    p.add_argument("--stamp", help="skip the build when this file records the same inputs and --out exists")
    p.add_argument("entrypoint", nargs="*", help="the Entrypoint (after --)")
    args = p.parse_args()

    entries = collect(args)
    key = input_key(args, entries)
    if args.stamp and os.path.exists(args.out):
        try:
            with open(args.stamp) as f:
                stamp = json.load(f)
            if stamp.get("key") == key:
                print(stamp["digest"])
                return
        except (OSError, ValueError, KeyError):
            pass
    digest = build(args, entries)
    if args.stamp:
        with open(args.stamp + ".tmp", "w") as f:
            json.dump({"key": key, "digest": digest, "name": args.name}, f)
        os.replace(args.stamp + ".tmp", args.stamp)
    print(digest)


if __name__ == "__main__":
    main()
