// The Memory page works without this file; it adds a live byte counter and
// reports htmx failures. Loaded as a file: the Content-Security-Policy allows
// no inline script.
(function () {
  "use strict";

  const encoder = new TextEncoder();

  function updateCounter(textarea) {
    const output = document.querySelector('[data-bytes-for="' + textarea.id + '"]');
    if (!output) {
      return;
    }
    const max = Number(textarea.dataset.maxBytes);
    // textarea.value uses LF line breaks, as the server stores them.
    const bytes = encoder.encode(textarea.value).length;
    output.textContent = String(bytes);
    const counter = output.closest(".byte-counter");
    const over = bytes > max;
    if (counter.classList.contains("over") !== over) {
      counter.classList.toggle("over", over);
      // Announced once per crossing, not on every keystroke.
      counter.querySelector(".over-note").textContent = over
        ? "Over the limit: remove some text before saving."
        : "";
    }
  }

  function initCounters(root) {
    root.querySelectorAll("textarea[data-max-bytes]").forEach(updateCounter);
  }

  document.addEventListener("input", function (event) {
    if (event.target.matches && event.target.matches("textarea[data-max-bytes]")) {
      updateCounter(event.target);
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    initCounters(document);
  });
  document.addEventListener("htmx:load", function (event) {
    initCounters(event.target);
  });

  // After a full-page action, its message takes the focus, or a refused form's first
  // invalid field does, so the keyboard and a screen reader start from what the action
  // did rather than from the top of the page; a field the page focuses itself wins.
  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[autofocus]") || (document.activeElement && document.activeElement !== document.body)) {
      return;
    }
    const invalid = document.querySelector('main [aria-invalid="true"]');
    const messages = document.querySelector(".messages");
    if (invalid) {
      invalid.focus();
    } else if (messages) {
      messages.tabIndex = -1;
      messages.focus({ preventScroll: true });
    }
  });

  document.documentElement.classList.add("js");

  function copyText(button, text) {
    const status = document.getElementById("copy-status");
    const done = function (message) {
      if (status) {
        status.textContent = message;
      }
      const label = button.textContent;
      button.textContent = message === "Copied." ? "Copied" : "Select it";
      window.setTimeout(function () {
        button.textContent = label;
      }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () {
          done("Copied.");
        },
        function () {
          done("Copying failed: select the id and copy it.");
        }
      );
    } else {
      done("Copying failed: select the id and copy it.");
    }
  }

  // Copy buttons: <button data-copy="<input id>"> copies that input's value;
  // <button data-copy-text="..."> copies its attribute (a full revision id).
  document.addEventListener("click", function (event) {
    const textButton = event.target.closest && event.target.closest("button[data-copy-text]");
    if (textButton) {
      copyText(textButton, textButton.dataset.copyText);
      return;
    }
    const button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) {
      return;
    }
    const input = document.getElementById(button.dataset.copy);
    const status = document.querySelector('[data-copy-status-for="' + button.dataset.copy + '"]');
    const done = function (text) {
      if (status) {
        status.textContent = text;
      }
    };
    input.select();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(
        function () {
          done("Copied.");
        },
        function () {
          done("Select the key and copy it.");
        }
      );
    } else {
      done(document.execCommand("copy") ? "Copied." : "Select the key and copy it.");
    }
  });

  // Checkbox lists with "Select all / none" and a live count (export, bulk actions).
  function updateSelection(form) {
    const count = form.querySelector("[data-selection-count]");
    if (!count) {
      return;
    }
    const boxes = form.querySelectorAll('input[type="checkbox"][name]');
    let chosen = 0;
    let documents = 0;
    boxes.forEach(function (box) {
      if (box.checked) {
        chosen += 1;
        const label = form.querySelector('label[for="' + box.id + '"] [data-documents]');
        documents += label ? Number(label.dataset.documents) : 0;
      }
    });
    const plural = function (n, word) {
      return n + " " + word + (n === 1 ? "" : "s");
    };
    let text = chosen + " of " + plural(boxes.length, count.dataset.noun || "resource") + " selected";
    if (form.querySelector("[data-documents]")) {
      text += ", " + plural(documents, "document");
    }
    count.textContent = text;
  }

  document.addEventListener("click", function (event) {
    const link = event.target.closest && event.target.closest("[data-select]");
    if (!link || !link.closest("form")) {
      return;
    }
    event.preventDefault();
    const form = link.closest("form");
    const on = link.dataset.select === "all";
    form.querySelectorAll('input[type="checkbox"][name]').forEach(function (box) {
      box.checked = on;
    });
    updateSelection(form);
  });
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches('input[type="checkbox"]') && event.target.form) {
      updateSelection(event.target.form);
    }
  });

  // Keyboard: "/" search, Esc cancels a confirmation, j/k move in lists, "?" help.
  let opener = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.elt && event.detail.elt.matches("a[hx-get]")) {
      opener = event.detail.elt;
    }
  });

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function cancelConfirmation() {
    const cancel = document.querySelector("[data-cancel]");
    if (!cancel) {
      return false;
    }
    const holder = cancel.closest("#panel, [id$=\"-dialog\"]");
    if (holder) {
      // A confirmation swapped into the page: remove it and go back where it came from.
      holder.replaceChildren();
      if (opener && document.contains(opener)) {
        opener.focus();
      }
    } else {
      window.location.assign(cancel.href);
    }
    return true;
  }

  function listRows() {
    return Array.from(document.querySelectorAll("main table.grid tbody tr")).filter(function (row) {
      return row.querySelector("a[href]") && !row.classList.contains("load-more");
    });
  }

  function moveInList(step) {
    const rows = listRows();
    if (!rows.length) {
      return;
    }
    const current = rows.findIndex(function (row) {
      return row.contains(document.activeElement);
    });
    const next = current < 0 ? (step > 0 ? 0 : rows.length - 1) : Math.min(Math.max(current + step, 0), rows.length - 1);
    rows.forEach(function (row) {
      row.classList.remove("kb-current");
    });
    rows[next].classList.add("kb-current");
    rows[next].querySelector("a[href]").focus();
  }

  function toggleHelp() {
    const help = document.getElementById("keyboard-help");
    if (!help) {
      return;
    }
    if (help.open) {
      help.close();
    } else {
      help.showModal();
    }
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("[data-help]")) {
      toggleHelp();
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) {
      return;
    }
    if (event.key === "Escape") {
      const help = document.getElementById("keyboard-help");
      if (help && help.open) {
        return; // the dialog closes itself
      }
      if (cancelConfirmation()) {
        event.preventDefault();
      }
      return;
    }
    if (typing(event.target)) {
      return;
    }
    if (event.key === "/") {
      // A page's own filter box where it has one, else the header's search box.
      const search = document.querySelector('main input[type="search"]') || document.getElementById("site-search");
      if (search) {
        event.preventDefault();
        search.focus();
        search.select();
      }
    } else if (event.key === "j" || event.key === "k") {
      event.preventDefault();
      moveInList(event.key === "j" ? 1 : -1);
    } else if (event.key === "?") {
      event.preventDefault();
      toggleHelp();
    }
  });

  function showStatus(text) {
    const status = document.getElementById("htmx-status");
    if (status) {
      status.textContent = text;
      status.hidden = false;
    }
  }

  document.addEventListener("htmx:responseError", function (event) {
    const xhr = event.detail.xhr;
    if (xhr.status === 429) {
      // Past a request rate: the server's message says how long to wait, and a reload
      // now would be refused too.
      const answer = new DOMParser().parseFromString(xhr.responseText, "text/html");
      const said = answer.querySelector(".error-page p");
      if (said && said.textContent.trim()) {
        showStatus(said.textContent.trim());
        return;
      }
    }
    showStatus(
      "This part of the page could not be loaded (HTTP " +
        xhr.status +
        "). Reload the page to see the current state."
    );
  });
  document.addEventListener("htmx:sendError", function () {
    showStatus("The server could not be reached. Check your connection and try again.");
  });
  document.addEventListener("htmx:beforeRequest", function () {
    const status = document.getElementById("htmx-status");
    if (status) {
      status.hidden = true;
    }
  });
})();

(function () {
  "use strict";
  // The document list's bulk selection: row boxes belong to the bulk form by their
  // form="..." attribute; the header box selects every row on the page.
  function rowBoxes(formId) {
    return document.querySelectorAll('input[type="checkbox"][name="doc"][form="' + formId + '"]');
  }
  function updateBulk(formId) {
    const form = document.getElementById(formId);
    const count = form && form.querySelector("[data-bulk-count]");
    if (!count) {
      return;
    }
    let chosen = 0;
    rowBoxes(formId).forEach(function (box) {
      chosen += box.checked ? 1 : 0;
    });
    count.textContent = chosen ? chosen + " selected:" : "Select documents for";
    // The actions wait for a ticked box or "Select all matching" (the server also
    // refuses an empty selection).
    const all = form.querySelector('input[name="all"][value="matching"]');
    const none = chosen === 0 && !(all && all.checked);
    form.querySelectorAll('button[name="action"]').forEach(function (button) {
      button.disabled = none;
    });
  }
  function initBulk() {
    document.querySelectorAll("[data-bulk-count]").forEach(function (count) {
      updateBulk(count.closest("form").id);
    });
  }
  document.addEventListener("DOMContentLoaded", initBulk);
  // Rows swapped in by the filter or "Load more" come unticked: count again.
  document.addEventListener("htmx:load", initBulk);
  document.addEventListener("change", function (event) {
    const target = event.target;
    if (!target.matches) {
      return;
    }
    if (target.matches("[data-select-page]")) {
      rowBoxes(target.dataset.selectPage).forEach(function (box) {
        box.checked = target.checked;
      });
      updateBulk(target.dataset.selectPage);
    } else if (target.matches('input[name="doc"][form]')) {
      updateBulk(target.getAttribute("form"));
    } else if (target.matches('input[name="all"]') && target.form) {
      updateBulk(target.form.id);
    }
  });
  // "Select all matching" sends the list's filters: the id/title filter as typed now
  // (htmx filters the rows without reloading the page, and so the form).
  document.addEventListener("submit", function (event) {
    const form = event.target;
    // The way back: the list's address as it is now (the filter pushes it as it narrows
    // the rows); the server keeps only the list's own parameters.
    const back = form.id === "bulk" && form.querySelector('input[type="hidden"][name="back"]');
    if (back) {
      back.value = window.location.search.replace(/^\?/, "");
    }
    const all = form.querySelector && form.querySelector('input[name="all"][value="matching"]');
    const typed = document.getElementById("filter-q");
    if (!all || !all.checked || !typed) {
      return;
    }
    let q = form.querySelector('input[type="hidden"][name="q"]');
    if (!q) {
      q = document.createElement("input");
      q.type = "hidden";
      q.name = "q";
      form.appendChild(q);
    }
    q.value = typed.value.trim();
  });
})();

(function () {
  "use strict";
  // At phone width tables are cards: each cell shows its column's name (data-label),
  // copied here once for every table from its head. A head that is only a hidden
  // label (actions, a checkbox) gives none.
  function columnNames(table) {
    const names = [];
    const head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!head) {
      return names;
    }
    Array.from(head.cells).forEach(function (cell) {
      const hidden = cell.querySelector(".visually-hidden, input");
      const text = cell.textContent.replace(/\s+/g, " ").trim();
      const name = hidden && (hidden.matches("input") || hidden.textContent.trim() === text) ? "" : text;
      for (let i = 0; i < (cell.colSpan || 1); i += 1) {
        names.push(name);
      }
    });
    return names;
  }
  function labelCells() {
    document.querySelectorAll("table.grid").forEach(function (table) {
      const names = columnNames(table);
      if (!names.length) {
        return;
      }
      Array.from(table.tBodies).forEach(function (body) {
        Array.from(body.rows).forEach(function (row) {
          let column = 0;
          Array.from(row.cells).forEach(function (cell) {
            const name = names[column];
            if (name && cell.tagName === "TD" && (cell.colSpan || 1) === 1 && !cell.hasAttribute("data-label")) {
              cell.setAttribute("data-label", name);
            }
            column += cell.colSpan || 1;
          });
        });
      });
    });
  }
  function currentTabInView() {
    const current = document.querySelector('.section-tabs a[aria-current="page"]');
    const tabs = current && current.closest(".tabs");
    if (tabs && tabs.scrollWidth > tabs.clientWidth) {
      tabs.scrollLeft = current.offsetLeft - tabs.clientWidth / 2 + current.offsetWidth / 2;
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    labelCells();
    currentTabInView();
  });
  document.addEventListener("htmx:load", labelCells);
})();
