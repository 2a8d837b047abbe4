// Placeholder: the admin operations strip at the top of the shell (issue 26 item 2: installs' fan-out
// roll-up, "2 of 5 nodes done"); the pages helper fills it in. Nothing to show: render nothing.
export default function OpsStrip() {
  return null;
}
