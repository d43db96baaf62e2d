"""MkDocs hooks of nslab's documentation site (``mkdocs.yml``: ``hooks:``).

Two things a plain MkDocs build cannot do:

* the site's home page is the repository's ``README.md`` (one landing page,
  not two that drift apart); its links are written from the repository's root
  (``docs/tutorial.md``, ``studies/ecmp-failover.yaml``) and are rewritten for
  the site;
* a page may link to a file of the repository outside ``docs/`` (a study
  file, a test): the file is copied into the site under ``repo/`` and the link
  points there, so it works on GitHub and in the site alike. A link to a file
  that does not exist is left as it is, and ``mkdocs build --strict`` fails on
  it.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Any, Dict, Set

from mkdocs.structure.files import File, Files

#: a Markdown link or image target: ](path) or ](path#anchor)
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_REPO = "repo"

#: src_uri of each repository file the site carries -> its absolute path
_carried: Dict[str, str] = {}


def _is_url(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target)) or target.startswith("/")


def _outside(docs_dir: str, page_dir: str, target: str) -> str | None:
    """The repository path a link from ``page_dir`` points at, if outside docs/."""
    root = os.path.dirname(docs_dir)
    path = os.path.normpath(os.path.join(docs_dir, page_dir, target))
    if path.startswith(docs_dir + os.sep) or path == docs_dir:
        return None
    if not path.startswith(root + os.sep):
        return None
    return os.path.relpath(path, root).replace(os.sep, "/")


def _links(text: str):
    for m in _LINK.finditer(_FENCE.sub("", text)):
        if not _is_url(m.group(2)):
            yield m.group(2)


def on_files(files: Files, config: Any) -> Files:
    docs_dir = os.path.abspath(config["docs_dir"])
    root = os.path.dirname(docs_dir)
    readme = os.path.join(root, "README.md")
    with open(readme, encoding="utf-8") as f:
        home = f.read()
    files.append(File.generated(config, "index.md", content=home))
    wanted: Set[str] = set()
    for target in _links(home):
        if not target.startswith("docs/"):
            wanted.add(posixpath.normpath(target))
    for file in list(files):
        if not file.src_uri.endswith(".md") or file.abs_src_path is None:
            continue
        with open(file.abs_src_path, encoding="utf-8") as f:
            text = f.read()
        page_dir = posixpath.dirname(file.src_uri)
        for target in _links(text):
            rel = _outside(docs_dir, page_dir, target)
            if rel:
                wanted.add(rel)
    for rel in sorted(wanted):
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            uri = f"{_REPO}/{rel}"
            _carried[rel] = uri
            files.append(File.generated(config, uri, abs_src_path=path))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs_dir = os.path.abspath(config["docs_dir"])
    src = page.file.src_uri
    page_dir = posixpath.dirname(src)
    from_readme = src == "index.md" and page.file.abs_src_path is None

    def fix(m: "re.Match[str]") -> str:
        target = m.group(2)
        if _is_url(target):
            return m.group(0)
        if from_readme:
            norm = posixpath.normpath(target)
            if norm.startswith("docs/"):
                new = norm[len("docs/"):]
            else:
                new = _carried.get(norm, target)
        else:
            rel = _outside(docs_dir, page_dir, target)
            if rel is None or rel not in _carried:
                return m.group(0)
            new = posixpath.relpath(_carried[rel], page_dir or ".")
        return m.group(1) + new + (m.group(3) or "") + m.group(4)

    # leave fenced code alone: rewrite only outside ``` blocks
    out, last = [], 0
    for block in _FENCE.finditer(markdown):
        out.append(_LINK.sub(fix, markdown[last:block.start()]))
        out.append(block.group(0))
        last = block.end()
    out.append(_LINK.sub(fix, markdown[last:]))
    return "".join(out)
