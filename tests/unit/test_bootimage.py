"""The uncompressed PVH kernel inside a bzImage (nslab.hosts.bootimage) and
where a guest's boot image is kept (nslab.hosts.vm.boot_image), on images
built here the way the kernel's build lays them out, and on the cached Debian
kernels when setup-kernel.sh has unpacked them."""
import glob
import gzip
import lzma
import os
import shutil
import struct
import subprocess

import pytest

from nslab.hosts import bootimage, vm


def _elf(note_type=bootimage.XEN_ELFNOTE_PHYS32_ENTRY, machine=62, entry=0x1000000):
    """A 64-bit ELF with one PT_NOTE segment holding a Xen note (what a
    CONFIG_PVH kernel carries, among others)."""
    other = struct.pack("<III", 4, 8, 5) + b"Xen\0" + b"xen-3.0\0"  # a note before it
    note = other + struct.pack("<III", 4, 4, note_type) + b"Xen\0" + struct.pack("<I", entry)
    phoff, phentsize = 64, 56
    note_off = phoff + phentsize
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, phoff, 0, 0, 64, phentsize,
                                 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 4, 4, note_off, 0, 0, len(note), len(note), 4)
    return header + phdr + note + b"\0" * 4096


def _bzimage(payload, setup_sects=3, version=0x20F):
    """The kernel build's bzImage: setup sectors, then the protected-mode part
    with the compressed payload at payload_offset (boot protocol 2.08+)."""
    setup = bytearray(512 * (setup_sects + 1))
    setup[0x1F1] = setup_sects
    setup[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", setup, 0x206, version)
    head = b"\0" * 0x40  # the decompressor's own code, before the payload
    struct.pack_into("<II", setup, 0x248, len(head), len(payload))
    return bytes(setup) + head + payload + b"\0" * 64


def _size_appended(data, plain):
    """How the kernel's build ends an xz or zstd payload: the plain size, 4 bytes."""
    return data + struct.pack("<I", len(plain))


def test_an_xz_payload_gives_its_elf_with_the_pvh_entry():
    elf = _elf(entry=0x1234000)
    image = _bzimage(_size_appended(lzma.compress(elf, format=lzma.FORMAT_XZ), elf))
    assert bootimage.vmlinux(image) == elf
    assert bootimage.pvh_entry(elf) == 0x1234000


def test_a_gzip_payload_is_read_too():
    elf = _elf()
    assert bootimage.vmlinux(_bzimage(gzip.compress(elf))) == elf


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd program here")
def test_a_zstd_payload_is_read_without_its_appended_size():
    elf = _elf()
    packed = subprocess.run(["zstd", "-q", "-c"], input=elf, capture_output=True,
                            check=True).stdout
    assert bootimage.vmlinux(_bzimage(_size_appended(packed, elf))) == elf


def test_what_cannot_be_booted_uncompressed_says_why():
    elf = _elf()
    xz = lzma.compress(elf, format=lzma.FORMAT_XZ)
    cases = [
        (b"MZ" + bytes(4096), "not a bzImage"),
        (_bzimage(xz, version=0x207), "boot protocol 2.7 has no payload fields"),
        (_bzimage(b"BZh91AY&SY" + bytes(64)), "none of xz, zstd, gzip"),
        (_bzimage(lzma.compress(b"plain text", format=lzma.FORMAT_XZ)), "not an ELF"),
        (_bzimage(lzma.compress(_elf(machine=183), format=lzma.FORMAT_XZ)), "not x86-64"),
        (_bzimage(lzma.compress(_elf(note_type=17), format=lzma.FORMAT_XZ)), "CONFIG_PVH"),
        (_bzimage(xz[:len(xz) // 2]), "did not decompress"),
    ]
    for image, why in cases:
        with pytest.raises(bootimage.NotBootable, match=why):
            bootimage.vmlinux(image)


def test_a_payload_past_the_files_end_is_refused():
    image = bytearray(_bzimage(b"\xfd7zXZ\x00" + bytes(32)))
    struct.pack_into("<I", image, 0x24C, 1 << 30)
    with pytest.raises(bootimage.NotBootable, match="outside the file"):
        bootimage.payload(bytes(image))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "kernel"
    (c / "linux-image-6.1.0-57-amd64" / "boot").mkdir(parents=True)
    monkeypatch.setenv("NSLAB_KERNEL_CACHE", str(c))
    monkeypatch.setattr(vm, "_BOOT_IMAGES", {})
    return c


def test_the_boot_image_is_kept_beside_the_vmlinuz_in_the_cache_once(cache, monkeypatch):
    boot = cache / "linux-image-6.1.0-57-amd64" / "boot"
    elf = _elf()
    vmlinuz = boot / "vmlinuz-6.1.0-57-amd64"
    vmlinuz.write_bytes(_bzimage(_size_appended(lzma.compress(elf, format=lzma.FORMAT_XZ), elf)))
    os.symlink("linux-image-6.1.0-57-amd64", cache / "bookworm")
    linked = str(cache / "bookworm" / "boot" / "vmlinuz-6.1.0-57-amd64")
    assert vm.boot_image(linked) == str(boot / "vmlinux-6.1.0-57-amd64")
    assert (boot / "vmlinux-6.1.0-57-amd64").read_bytes() == elf
    # the next guest (another process: nothing remembered) boots the same file
    monkeypatch.setattr(vm, "_BOOT_IMAGES", {})
    calls = []
    monkeypatch.setattr(bootimage, "vmlinux", lambda data: calls.append(1) or b"")
    assert vm.boot_image(linked) == str(boot / "vmlinux-6.1.0-57-amd64")
    assert calls == []


def test_a_kernel_with_no_pvh_image_or_outside_the_cache_boots_as_it_is(cache, tmp_path):
    boot = cache / "linux-image-6.1.0-57-amd64" / "boot"
    plain = boot / "vmlinuz-6.1.0-57-amd64"
    plain.write_bytes(_bzimage(lzma.compress(_elf(note_type=17), format=lzma.FORMAT_XZ)))
    assert vm.boot_image(str(plain)) == str(plain)
    assert sorted(os.listdir(boot)) == ["vmlinuz-6.1.0-57-amd64"]
    # a user's own kernel ($NSLAB_KERNEL): nothing is written beside it
    own = tmp_path / "mine" / "vmlinuz-6.1.0-57-amd64"
    own.parent.mkdir()
    elf = _elf()
    own.write_bytes(_bzimage(lzma.compress(elf, format=lzma.FORMAT_XZ)))
    assert vm.boot_image(str(own)) == str(own)
    assert os.listdir(own.parent) == ["vmlinuz-6.1.0-57-amd64"]


CACHED = sorted(glob.glob(os.path.join(vm.DEFAULT_CACHE, "linux-image-*", "boot", "vmlinuz-*")))


@pytest.mark.skipif(not CACHED, reason="no kernel unpacked (make test-kernel)")
@pytest.mark.parametrize("vmlinuz", CACHED, ids=os.path.basename)
def test_debians_kernels_hold_a_pvh_kernel(vmlinuz):
    """Debian 12's (xz) and Debian 13's (zstd) kernels, as setup-kernel.sh
    unpacked them: each holds an x86-64 ELF with its PVH entry."""
    if vmlinuz.endswith("deb13-amd64") and shutil.which("zstd") is None:
        pytest.skip("Debian 13's kernel is zstd inside: no zstd program here")
    with open(vmlinuz, "rb") as f:
        elf = bootimage.vmlinux(f.read())
    assert bootimage.pvh_entry(elf) > 0
    assert b"Linux version " + os.path.basename(vmlinuz)[len("vmlinuz-"):].encode() in elf
