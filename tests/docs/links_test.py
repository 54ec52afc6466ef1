"""The README and docs/ pages point at things that exist: every relative link's file (and its
#anchor, for a Markdown page) and every backticked repository path (`daemon/jobs/job.h`,
`tools/main_job.sh`). Paths under bazel-bin/ and ones with placeholders are not checked."""
import os
import re

import pytest

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the source tree (runfiles link into it)
TOP = ("proto", "daemon", "client", "ctl", "tls", "tfplugin", "python", "deploy", "tests", "bench",
       "docs", "tools", "third_party")
PAGES = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                         if f.endswith(".md")]


def anchors(path):
    """GitHub's anchors for a page's headings."""
    found = set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"#+ (.*)", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(a)
    return found


def without_code_blocks(text):
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    path = os.path.join(ROOT, page)
    text = without_code_blocks(open(path, encoding="utf-8").read())
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            bad.append(f"{target}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with anchor #{anchor}")
    assert not bad, f"{page}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES)
def test_named_repository_paths_exist(page):
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    bad = []
    for code in re.findall(r"`([^`\n]+)`", text):
        for word in code.split():
            word = word.strip(".,;:()'\"")
            if "/" not in word or word.split("/")[0] not in TOP:
                continue
            if re.search(r"[<>*{}$]|[A-Z]{2,}|\.\.\.", word):  # placeholders, globs, variables
                continue
            if not os.path.exists(os.path.join(ROOT, word.split(":")[0])):
                bad.append(word)
    assert not bad, f"{page} names paths that do not exist: {sorted(set(bad))}"
