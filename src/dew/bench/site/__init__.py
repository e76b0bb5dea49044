"""The results site: every record rendered into static pages with each row's history,
its change points and the published references (`nox -s report`).

records   find and load every valid record under the given directories (Entry)
history   each row's series across records, stack differences, change points (ruptures)
pages     what each page shows, for the templates
build     the command: `python -m dew.bench.site [DIRS...] [--out DIR]`
docs      the tables of docs/performance.md and the README, generated from records

A row's charts are drawn by dew.bench.analysis.plots (also compare --plot); the browser
that checks the pages lives with the tests (tests/infra/browser.py).
"""
