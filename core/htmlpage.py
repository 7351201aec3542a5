"""The frame of Antler's HTML pages (`antler chain report`, `antler replay --html`).

Each page is one self-contained file: `HEAD` opens it up to its own style rules
(the document head, the title placeholder `{{TITLE}}`, and the rules every page
shares: box sizing, the body's font and colours, the header band); the page adds
its colour variables, its own rules and its body. Colours are variables a page
sets in `:root` (`--fg`, `--dim`, `--line` at least).
"""

from __future__ import annotations

__all__ = ["HEAD"]

HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{TITLE}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
         color: var(--fg); background: #fafbfc; }
  header { padding: 16px 24px; border-bottom: 1px solid var(--line); background: #fff; }
"""
"""The page up to its own style rules (inside an open `<style>`)."""
