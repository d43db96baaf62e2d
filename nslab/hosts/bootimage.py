"""A stock kernel's uncompressed image, booted straight into 64-bit code (PVH).

A Debian ``vmlinuz`` is a bzImage: real-mode set-up code and a compressed
kernel (xz in Debian 12, zstd in Debian 13) that the guest decompresses
itself before it prints its first line. Under QEMU's TCG that decompression
is emulated instruction by instruction: measured on the development VM
(Debian 12's 6.1, xz, icount shift 3, 1 vCPU; ``nslab bench boot``), its
first message came 7.2 s into the boot, and 1.4 s into a boot of the ELF
image inside, which powered off after 18.1 s instead of 24.2
(docs/benchmarks.md). Debian's kernels are built with ``CONFIG_PVH``, whose
ELF note tells QEMU where the kernel enters in 32-bit protected mode, so
QEMU boots the ``vmlinux`` inside the bzImage directly, with the same
command line and initramfs.

This module finds that ``vmlinux`` (the boot protocol's ``payload_offset``
and ``payload_length``), decompresses it (xz and gzip with the standard
library, zstd with the ``zstd`` program), and checks it is an x86-64 ELF
with the PVH entry note before anyone boots it. It reads and returns bytes
only; :func:`nslab.hosts.vm.boot_image` keeps the result beside the vmlinuz
in the kernel cache.
"""
from __future__ import annotations

import lzma
import shutil
import struct
import subprocess
import zlib
#: Where the setup header's fields sit in a bzImage (Documentation/arch/x86/boot.rst).
_SETUP_SECTS = 0x1F1
_HEADER_MAGIC = 0x202  # "HdrS"
_VERSION = 0x206
_PAYLOAD = 0x248  # payload_offset, payload_length (protocol 2.08+)
#: The most a kernel may grow to when decompressed (Debian's are ~66 MB).
MAX_IMAGE = 512 << 20
#: ELF note of Xen's name whose type says where a PVH boot enters the kernel.
XEN_ELFNOTE_PHYS32_ENTRY = 18


class NotBootable(ValueError):
    """The image has no PVH-bootable kernel inside (why, in one line)."""


def payload(bzimage: bytes) -> bytes:
    """The compressed kernel inside a bzImage."""
    if len(bzimage) < 0x260 or bzimage[_HEADER_MAGIC:_HEADER_MAGIC + 4] != b"HdrS":
        raise NotBootable("not a bzImage (no HdrS setup header)")
    version, = struct.unpack_from("<H", bzimage, _VERSION)
    if version < 0x208:
        raise NotBootable(f"boot protocol {version >> 8}.{version & 0xFF} has no payload fields")
    setup_sects = bzimage[_SETUP_SECTS] or 4
    offset, length = struct.unpack_from("<II", bzimage, _PAYLOAD)
    start = (setup_sects + 1) * 512 + offset
    if not length or start + length > len(bzimage):
        raise NotBootable("the payload lies outside the file")
    return bzimage[start:start + length]


def _zstd(data: bytes) -> bytes:
    # the kernel's build appends the decompressed size (4 bytes, as for xz,
    # whose decoder stops at its stream's end by itself); zstd would take it
    # for a truncated second frame
    data = data[:-4]
    exe = shutil.which("zstd")
    if exe is None:
        raise NotBootable("a zstd kernel and no zstd program (apt install zstd)")
    out = subprocess.run([exe, "-d", "-c", "-q", f"--memory={MAX_IMAGE >> 20}MB"],
                         input=data, capture_output=True, timeout=120)
    if out.returncode != 0:
        raise NotBootable(f"zstd could not decompress the kernel (exit {out.returncode})")
    return out.stdout


def decompress(data: bytes) -> bytes:
    """The kernel from its compressed payload (xz, zstd or gzip)."""
    try:
        if data.startswith(b"\xfd7zXZ\x00"):
            d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            out = d.decompress(data, max_length=MAX_IMAGE + 1)
            if not d.eof and len(out) <= MAX_IMAGE:
                raise NotBootable("the payload did not decompress: it ends early")
        elif data.startswith(b"\x28\xb5\x2f\xfd"):
            out = _zstd(data)
        elif data.startswith(b"\x1f\x8b"):
            z = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = z.decompress(data, MAX_IMAGE + 1)
            if not z.eof and len(out) <= MAX_IMAGE:
                raise NotBootable("the payload did not decompress: it ends early")
        else:
            raise NotBootable(f"a payload compressed as none of xz, zstd, gzip "
                              f"(it starts {data[:6].hex()})")
    except (lzma.LZMAError, zlib.error, OSError, EOFError, subprocess.TimeoutExpired) as exc:
        raise NotBootable(f"the payload did not decompress: {exc}") from None
    if len(out) > MAX_IMAGE:
        raise NotBootable(f"the kernel decompresses to over {MAX_IMAGE >> 20} MB")
    return out


def pvh_entry(elf: bytes) -> int:
    """The PVH entry point of an x86-64 ELF kernel (its Xen note of type 18)."""
    if elf[:4] != b"\x7fELF" or len(elf) < 64:
        raise NotBootable("the payload is not an ELF image")
    if elf[4] != 2 or elf[5] != 1:
        raise NotBootable("the payload is not a 64-bit little-endian ELF")
    machine, = struct.unpack_from("<H", elf, 18)
    if machine != 62:
        raise NotBootable(f"the payload is an ELF for machine {machine}, not x86-64")
    phoff, = struct.unpack_from("<Q", elf, 32)
    phentsize, phnum = struct.unpack_from("<HH", elf, 54)
    for i in range(phnum):
        base = phoff + i * phentsize
        if base + 56 > len(elf):
            break
        p_type, = struct.unpack_from("<I", elf, base)
        if p_type != 4:  # PT_NOTE
            continue
        off, = struct.unpack_from("<Q", elf, base + 8)
        size, = struct.unpack_from("<Q", elf, base + 32)
        pos, end = off, min(off + size, len(elf))
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name_at = pos + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            name = elf[name_at:name_at + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == XEN_ELFNOTE_PHYS32_ENTRY and descsz >= 4:
                entry, = struct.unpack_from("<I", elf, desc_at)
                return int(entry)
            pos = desc_at + ((descsz + 3) & ~3)
    raise NotBootable("the kernel has no PVH entry note (built without CONFIG_PVH)")


def vmlinux(bzimage: bytes) -> bytes:
    """The PVH-bootable ELF kernel inside ``bzimage``, or :class:`NotBootable`."""
    elf = decompress(payload(bzimage))
    pvh_entry(elf)
    return elf
