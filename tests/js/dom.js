// A browser-like global scope for the UI's modules under `node --test`: happy-dom's window, its document and
// storage, installed once per test file (the modules read them at call time, not import time).
import { Window } from "happy-dom";

const GLOBALS = ["document", "navigator", "location", "history", "localStorage", "sessionStorage", "HTMLElement",
  "Node", "Event", "CustomEvent", "PopStateEvent", "MouseEvent", "KeyboardEvent", "requestAnimationFrame",
  "cancelAnimationFrame", "getComputedStyle", "matchMedia", "FormData"];

export function installDom(url = "http://localhost/app") {
  const window = new Window({ url });
  globalThis.window = window;
  for (const name of GLOBALS) {
    const value = window[name];
    Object.defineProperty(globalThis, name, {
      value: typeof value === "function" && !/^[A-Z]/.test(name) ? value.bind(window) : value,
      configurable: true, writable: true,
    });
  }
  for (const name of ["addEventListener", "removeEventListener", "dispatchEvent"]) globalThis[name] = window[name].bind(window);
  return window;
}

// Lets Preact's scheduled renders and effects run.
export function settle(ms = 30) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
