// Client-side navigation (kept for the pages that import it from here): see router.js.
export { navigate } from "./router.js";
