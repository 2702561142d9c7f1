(function () {
  // a big plan's graph has a node per partition; its stages come from the page's own data, drawn on demand
  var stageData = document.getElementById("partition-stages");
  var view = document.getElementById("partition-view");
  var picker = document.getElementById("partition-open");
  var SVGNS = "http://www.w3.org/2000/svg";
  function el(name, attrs, parent) {
    var node = document.createElementNS(SVGNS, name);
    for (var k in attrs) { node.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function openPartition(pid) {
    if (!stageData || !view) { return; }
    var data = JSON.parse(stageData.textContent);
    // a name from the address (#open=constructor) is no partition for being a property every object has
    var rows = Object.prototype.hasOwnProperty.call(data.partitions, pid) ? data.partitions[pid] : null;
    view.textContent = "";
    if (!rows) { return; }
    var W = 172, H = 50, HG = 40, VG = 12, PAD = 16, cols = 0, depth = 0;
    for (var i = 0; i < rows.length; i++) { cols = Math.max(cols, rows[i][5] + 1); depth = Math.max(depth, rows[i][6] + 1); }
    var width = PAD * 2 + cols * W + (cols - 1) * HG, height = PAD * 2 + depth * (H + VG);
    var head = document.createElement("h3");
    head.textContent = "partition " + pid + ": " + rows.length + (rows.length === 1 ? " stage" : " stages");
    view.appendChild(head);
    var svg = el("svg", {"class": "plan-graph partition-stages", "data-partition": pid, viewBox: "0 0 " + width + " " + height,
                         width: Math.min(width, 1900) === width ? "100%" : width, role: "img"}, view);
    if (width <= 1900) { svg.setAttribute("style", "max-width:" + width + "px"); }
    function x(r) { return PAD + r[5] * (W + HG); }
    function y(r) { return PAD + r[6] * (H + VG); }
    for (i = 0; i < rows.length; i++) {
      for (var j = 0; j < rows[i][7].length; j++) {
        var a = rows[rows[i][7][j]], b = rows[i], x1 = x(a) + W, y1 = y(a) + H / 2, x2 = x(b), y2 = y(b) + H / 2, mid = (x1 + x2) / 2;
        el("path", {"class": "edge", d: "M" + x1 + "," + y1 + " C" + mid + "," + y1 + " " + mid + "," + y2 + " " + (x2 - 2) + "," + y2}, svg);
      }
    }
    for (i = 0; i < rows.length; i++) {
      var r = rows[i], status = data.statuses[r[4]];
      var g = el("g", {"class": "gnode stage status-" + status.replace(/ /g, "-"), id: "stage-" + r[0],
                       "data-tip": "stage " + r[0] + "\nop " + r[1] + "\npartition " + pid + "\n" + (r[2] || "?") + " " +
                                   (r[3] || "") + "\nstatus " + status}, svg);
      el("rect", {x: x(r), y: y(r), width: W, height: H, rx: 7, "class": "box"}, g);
      el("text", {x: x(r) + 13, y: y(r) + 19, "class": "nid"}, g).textContent = r[0] + (status === "failed" ? " \u2717" : "");
      el("text", {x: x(r) + 13, y: y(r) + 36, "class": "nsub"}, g).textContent = r[1] + " \u00b7 " + (r[2] || "?") + " " + (r[3] || "");
    }
    if (picker) { picker.value = pid; }
    var node = document.getElementById("partition-" + pid);
    var shown = document.querySelectorAll(".gnode.partition.open");
    for (i = 0; i < shown.length; i++) { shown[i].classList.remove("open"); }
    if (node) { node.classList.add("open"); }
  }
  document.addEventListener("click", function (ev) {
    var node = ev.target.closest ? ev.target.closest("[data-partition]") : null;
    if (node && node.classList.contains("partition")) { openPartition(node.getAttribute("data-partition")); view.scrollIntoView(); }
  });
  if (picker) { picker.addEventListener("change", function () { openPartition(picker.value); }); }
  // report.html#open=p3 opens a partition when the page loads: a link can point at one
  var wanted = /[#&]open=([^&]+)/.exec(location.hash);
  if (wanted) {
    // a malformed escape (#open=%E0) would end this script before report.js, whose tooltips the page then lacks
    var pid = wanted[1];
    try { pid = decodeURIComponent(pid); } catch (e) { /* the name as written: no partition has it */ }
    openPartition(pid);
  }
})();
