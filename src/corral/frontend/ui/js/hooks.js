// Hooks the pages share: read the API now, again on live hints and on a timer, and keep the last answer.

import { useCallback, useEffect, useRef, useState } from "./lib.js";
import { useFollow } from "./live.js";
import { toast } from "./ui.js";

// {data, error, reload}: `load()` runs at mount, on `kinds` events (debounced) and every `everyMs`; a failed
// re-read keeps the last data. `reload()` answers the fresh data (or throws) for the caller's own action.
export function useApi(load, { kinds = [], everyMs = 0, initial = null, quiet = false } = {}) {
  const [state, setState] = useState({ data: initial, error: null, loaded: false });
  const latest = useRef(load);
  latest.current = load;
  const alive = useRef(true);
  const reload = useCallback(async () => {
    try {
      const data = await latest.current();
      if (alive.current) setState({ data, error: null, loaded: true });
      return data;
    } catch (err) {
      if (alive.current) setState((s) => ({ ...s, error: err, loaded: true }));
      throw err;
    }
  }, []);
  useEffect(() => {
    alive.current = true;
    reload().catch((err) => { if (!quiet) toast(err.message, "danger"); });
    return () => { alive.current = false; };
  }, [reload, quiet]);
  useFollow(kinds, () => reload().catch(() => {}), { everyMs });
  return { ...state, reload };
}

// A field's state and its onInput handler: const [value, set, onInput] = useField("").
export function useField(initial = "") {
  const [value, setValue] = useState(initial);
  return [value, setValue, (event) => setValue(event.currentTarget.value)];
}
