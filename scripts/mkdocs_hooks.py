"""mkdocs hooks (mkdocs.yml `hooks:`): the site's home page is README.md and its results
page bench/RESULTS.md, each kept in one place and read from the repository at build time.

- README.md becomes index.md, bench/RESULTS.md results.md; their links are rewritten for
  the site (README's `docs/x.md` -> `x.md`; `bench/RESULTS.md#s` -> `results.md#s` from
  every page), so a link that is wrong on GitHub is wrong on the site too and
  `mkdocs build --strict` fails on it.
- Headings get GitHub's anchors (tests/test_docs.py's rule), so one `#anchor` works in
  both places.
"""
from __future__ import annotations

import os
import re

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A markdown link to something that is neither a page, a picture, a web address nor an
# anchor: after the rewrites above, only README's links to repository files.
REPO_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((?!https?:|#|[\w./-]+\.(?:md|png)(?:#|\)))([^)]+)\)")
GENERATED = {"index.md": "README.md", "results.md": os.path.join("bench", "RESULTS.md")}


def github_slug(value: str, separator: str = "-") -> str:
  """GitHub's anchor of a heading: lower-cased, every character other than a letter,
  digit, `_`, `-` or space dropped, each space a `-` (runs of `-` are kept, unlike
  python-markdown's own slugify)."""
  del separator
  return re.sub(r"[^\w\- ]", "", value.strip().lower()).replace(" ", "-")


def on_config(config):
  if "toc" not in config.markdown_extensions:
    config.markdown_extensions.append("toc")
  config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
  return config


def on_files(files, config):
  for dest, src in GENERATED.items():
    with open(os.path.join(ROOT, src), encoding="utf-8") as f:
      files.append(File.generated(config, dest, content=f.read()))
  return files


def on_page_markdown(markdown, page, config, files):
  del config, files
  if page.file.src_uri == "index.md":  # README.md, whose links start at the repository root
    markdown = markdown.replace("](docs/", "](")
    markdown = markdown.replace("](bench/RESULTS.md", "](results.md")
    # Other repository files (LICENSE, ...) are not pages of the site: their name stays.
    markdown = REPO_LINK.sub(r"\1 (`\2`)", markdown)
  elif page.file.src_uri == "results.md":  # bench/RESULTS.md: its pictures are in docs/
    markdown = markdown.replace("](../docs/", "](")
  else:  # a page under docs/
    markdown = markdown.replace("](../bench/RESULTS.md", "](results.md")
    markdown = markdown.replace("](../README.md", "](index.md")
  return markdown
