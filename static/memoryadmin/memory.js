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

  // Copy buttons: <button data-copy="<input id>"> copies that input's value.
  document.addEventListener("click", function (event) {
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

  function showStatus(text) {
    const status = document.getElementById("htmx-status");
    if (status) {
      status.textContent = text;
      status.hidden = false;
    }
  }

  document.addEventListener("htmx:responseError", function (event) {
    showStatus(
      "This part of the page could not be loaded (HTTP " +
        event.detail.xhr.status +
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
