// dew results site: sortable tables and a row filter. Bundled, no dependencies.
"use strict";

function cellValue(cell) {
  const text = (cell.dataset.sort || cell.textContent).trim();
  const number = parseFloat(text.replace(/,/g, ""));
  return Number.isNaN(number) || !/^[-+]?[\d.,]/.test(text) ? text.toLowerCase() : number;
}

function sortBy(table, column, header) {
  const body = table.tBodies[0];
  const ascending = header.getAttribute("aria-sort") !== "ascending";
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = cellValue(a.cells[column] || a.cells[0]);
    const y = cellValue(b.cells[column] || b.cells[0]);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
    return ascending ? order : -order;
  });
  table.querySelectorAll("th").forEach((th) => th.removeAttribute("aria-sort"));
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  rows.forEach((row) => body.appendChild(row));
}

function filterRows(query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  document.querySelectorAll("table.filterable tbody tr").forEach((row) => {
    const text = row.textContent.toLowerCase();
    row.hidden = !words.every((word) => text.includes(word));
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable").forEach((table) => {
    table.querySelectorAll("thead th").forEach((header, column) => {
      header.addEventListener("click", () => sortBy(table, column, header));
    });
  });
  const filter = document.getElementById("filter");
  if (filter) filter.addEventListener("input", () => filterRows(filter.value));
  document.body.dataset.ready = "true";  // the browser test reads this: the script ran
});
