"""The results site: every record rendered into static pages with each row's history,
its change points and the published references (`nox -s report`).

records   find and load every valid record under the given directories (Entry)
history   each row's series across records, stack differences, change points (ruptures)
figure    the one way to draw a row (the site's charts and compare --plot)
pages     what each page shows, for the templates
build     the command: `python -m dew.bench.site [DIRS...] [--out DIR]`
docs      the tables of docs/performance.md and the README, generated from records
browser   headless Chromium over the DevTools protocol: DOM checks and screenshots
"""
