// The UI's one view library, vendored (scripts/vendor-ui.sh; no build step, no CDN): Preact with htm's tagged
// templates for markup, and Preact's hooks. Every component imports from here, never from vendor/ directly,
// so a version change touches one file.
//
// A page is `export default function XPage({ params })`, `params` being the route's captured path segments.

import { h, render, Fragment, createContext, createRef, toChildArray } from "../vendor/preact/preact.module.js";
import htm from "../vendor/htm/htm.module.js";

export {
  useCallback,
  useContext,
  useEffect,
  useId,
  useLayoutEffect,
  useMemo,
  useReducer,
  useRef,
  useState,
} from "../vendor/preact/hooks.module.js";

export const html = htm.bind(h);
export { h, render, Fragment, createContext, createRef, toChildArray };
