// The three tabs, as the WAI-ARIA tabs pattern: arrow keys, Home and End move between tabs,
// the selected tab is the only one in the Tab order, and the URL's #hash names the tab.

export function initTabs(tablist) {
  const tabs = [...tablist.querySelectorAll('[role="tab"]')];
  const nameOf = (tab) => tab.id.replace(/^tab-/, "");

  function select(tab, { focus = false, updateHash = true } = {}) {
    for (const other of tabs) {
      const selected = other === tab;
      other.setAttribute("aria-selected", String(selected));
      other.tabIndex = selected ? 0 : -1;
      document.getElementById(other.getAttribute("aria-controls")).hidden = !selected;
    }
    if (focus) tab.focus();
    if (updateHash && location.hash !== `#${nameOf(tab)}`) history.replaceState(null, "", `#${nameOf(tab)}`);
  }

  function fromHash() {
    const wanted = tabs.find((tab) => `#${nameOf(tab)}` === location.hash);
    if (wanted) select(wanted, { updateHash: false });
  }

  for (const tab of tabs) tab.addEventListener("click", () => select(tab));
  tablist.addEventListener("keydown", (event) => {
    const current = tabs.indexOf(document.activeElement);
    if (current < 0) return;
    const moves = { ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: tabs.length - 1 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    select(tabs[(moves[event.key] + tabs.length) % tabs.length], { focus: true });
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
}
