#!/usr/bin/python3
# A screen reader's share, through AT-SPI2 alone: starts `demo-share window`, finds the sheet's
# entries and its header's labels (what is shared) by name, presses Notes, reads and sets the
# activity's text field through Text and EditableText, moves the focus with Tab and waits for the
# focus events, presses "Save" through the Action interface, and checks that the share completed,
# the note was written and the sheet came back with the focus on Notes.
#
#   dbus-run-session -- /usr/bin/python3 atspi-share.py DEMO_SHARE OUTPUT_DIR
#
# Needs DISPLAY (Xvfb), a session bus (dbus-run-session), at-spi2-core and python3-pyatspi, which
# imports only under Debian's own Python: run it as /usr/bin/python3. Prints the window's tree
# (twice: on the sheet, and during the share), one PASS or FAIL line per check, and exits 0 when
# every check passed. Every wait has a deadline.
import os, subprocess, sys

import pyatspi
from gi.repository import GLib

demo_share, output = sys.argv[1], sys.argv[2]
failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


context = GLib.MainContext.default()


def pump(seconds, until=lambda: False):
    """Runs the main context until `until()` holds or `seconds` pass: each turn waits for what
    can change the answer (an AT-SPI event, a line of the window's, the deadline's timer)."""
    expired = []

    def expire():
        expired.append(True)
        return False  # the timer runs once

    timer = GLib.timeout_add(int(seconds * 1000), expire)
    try:
        while True:
            try:
                if until():
                    return True
            except Exception:
                pass  # a node that went away between two looks: look again at the next event
            if expired:
                return False
            context.iteration(True)
    finally:
        if not expired:
            GLib.source_remove(timer)


events = []


def on_event(event):
    try:
        name, role = event.source.name, event.source.getRoleName()
    except Exception:
        name, role = "(gone)", ""
    events.append((event.type, role, name, event.detail1))


pyatspi.Registry.registerEventListener(on_event, "object:state-changed:focused", "object:state-changed:checked", "focus:")
# The changes the waits look for (an application, a control, a text, a value appearing): each
# wakes the main context, so that pump looks again.
pyatspi.Registry.registerEventListener(lambda event: None, "object:children-changed", "object:text-changed",
                                       "object:property-change")

# The window, its lines read as they come, on the main context.
window = subprocess.Popen([demo_share, "window", "--output", output], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
lines = []
pending = bytearray()


def read_output(fd, condition):
    data = os.read(fd, 65536)
    pending.extend(data)
    while b"\n" in pending:
        line, _, rest = bytes(pending).partition(b"\n")
        lines.append(line.decode("utf-8", "replace"))
        pending[:] = rest
    return bool(data)  # at the end of the output, the watch goes


GLib.io_add_watch(window.stdout.fileno(), GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP, read_output)


def finish(code):
    window.terminate()
    try:
        window.wait(10)
    except subprocess.TimeoutExpired:
        window.kill()
        window.wait()
    rest = bytes(pending) + window.stdout.read()
    lines.extend(line for line in rest.decode("utf-8", "replace").split("\n") if line)
    print("--- the window's output")
    print("\n".join(lines), flush=True)
    sys.exit(code)


def line_seen(prefix):
    return any(line.startswith(prefix) for line in lines)


check(pump(20, lambda: line_seen("window: sheet")), "the window shows its sheet")
desktop = pyatspi.Registry.getDesktop(0)
app = None


def find_app():
    global app
    app = next((a for a in desktop if a is not None and a.name == "demo-share"), None)
    return app is not None


if not check(pump(20, find_app), "the application demo-share on the AT-SPI desktop"):
    finish(1)


def walk(node):
    yield node
    for child in node:
        if child is not None:
            yield from walk(child)


def find(role, name):
    return next((n for n in walk(app) if n.getRole() == role and n.name == name), None)


def dump(title):
    print("--- " + title, flush=True)
    for node, depth in ((n, d) for n, d in depth_walk(app, 0)):
        states = sorted(pyatspi.stateToString(s) for s in node.getState().getStates())
        line = "%s%s %r" % ("  " * depth, node.getRoleName(), node.name)
        interfaces = node.get_interfaces()
        if "Text" in interfaces:
            text = node.queryText().getText(0, -1)
            if text != node.name:
                line += " text=%r" % text
        if "Value" in interfaces:
            value = node.queryValue()
            line += " value=%s of %s…%s" % (value.currentValue, value.minimumValue, value.maximumValue)
        if "Component" in interfaces:
            line += " %s" % (tuple(node.queryComponent().getExtents(pyatspi.WINDOW_COORDS)),)
        line += " [%s] {%s}" % (" ".join(s for s in states if s not in ("enabled", "sensitive", "showing", "visible")),
                                ",".join(sorted(i for i in interfaces if i not in ("Accessible", "Collection"))))
        print(line, flush=True)


def depth_walk(node, depth):
    yield node, depth
    for child in node:
        if child is not None:
            yield from depth_walk(child, depth + 1)


# The sheet: its entries by name; Notes, pressed through the Action interface.
notes = None
check(pump(10, lambda: find(pyatspi.ROLE_LIST_ITEM, "Notes") is not None), "the sheet's entry \"Notes\" (a list item)")
dump("the window's tree: the sheet")
notes = find(pyatspi.ROLE_LIST_ITEM, "Notes")
if notes is None:
    finish(1)
# The header: what is shared, a label per item.
check(find(pyatspi.ROLE_LABEL, "Text: Look at this sunset!") is not None and find(pyatspi.ROLE_LABEL, "Link: example.com") is not None,
      "the header's labels \"Text: Look at this sunset!\" and \"Link: example.com\"")
check(notes.getState().contains(pyatspi.STATE_FOCUSED), "Notes's row has the keyboard focus")
check("Action" in notes.get_interfaces() and notes.queryAction().getName(0) == "click", "Notes can be clicked (Action)")
notes.queryAction().doAction(0)
check(pump(20, lambda: line_seen("window: presenting com.example.demo-share.notes")), "pressing Notes presents it")

# The activity's text field, found by role and name inside the embedded activity.
field = None


def field_ready():
    global field
    field = find(pyatspi.ROLE_ENTRY, "Note")
    return field is not None and field.queryText().getText(0, -1).startswith("Look at this sunset!")


if not check(pump(20, field_ready), "the activity's text field \"Note\", holding the shared text (Text)"):
    dump("the window's tree when the field was not found")
    finish(1)
embedded = field
while embedded is not None and embedded.getRole() != pyatspi.ROLE_EMBEDDED:
    embedded = embedded.parent
check(embedded is not None and embedded.name == "Notes", "the field is inside the embedded activity \"Notes\"")
check(field.getState().contains(pyatspi.STATE_EDITABLE) and "EditableText" in field.get_interfaces(), "the field is editable (EditableText)")
check(pump(10, lambda: field.getState().contains(pyatspi.STATE_FOCUSED)), "the field has the focus when Notes appears")
field.queryEditableText().setTextContents("Written through AT-SPI")
check(pump(10, lambda: field.queryText().getText(0, -1) == "Written through AT-SPI"), "setTextContents reaches the activity and comes back in its tree")

# Tab moves the focus between the activity's controls: focus events arrive.
del events[:]
subprocess.run(["/usr/bin/xdotool", "search", "--sync", "--name", "^demo-share$", "windowfocus", "--sync", "key", "Tab"], check=True,
               timeout=20)


def focus_moved():
    gained = [e for e in events if e[0] == "object:state-changed:focused" and e[3] == 1]
    lost = [e for e in events if e[0] == "object:state-changed:focused" and e[3] == 0 and e[2] == "Note"]
    return gained and lost


check(pump(10, focus_moved), "Tab: the field loses the focus and the next control gains it (object:state-changed:focused)")
gained = [e for e in events if e[0] == "object:state-changed:focused" and e[3] == 1]
print("focus events: %s" % events, flush=True)
check(any(e[0] == "focus:" for e in events), "a focus: event")
dump("the window's tree: Notes, after the text was set and Tab")

# Save, found by role and name, pressed through the Action interface: the share completes.
save = find(pyatspi.ROLE_PUSH_BUTTON, "Save")
if not check(save is not None and "Action" in save.get_interfaces(), "the activity's button \"Save\" (Action)"):
    finish(1)
save.queryAction().doAction(0)
check(pump(20, lambda: line_seen("window: outcome completed")), "pressing Save completes the share")
check(pump(10, lambda: line_seen("window: wrote ")), "the note is written")
written = [line[len("window: wrote "):].split(" ")[0] for line in lines if line.startswith("window: wrote ")]
if written:
    with open(written[0], encoding="utf-8") as note:
        content = note.read()
    check(content == "Written through AT-SPI\nhttps://example.com/sunset", "the note holds the text set through AT-SPI: %r" % content)
# The result, then the sheet again: Notes's row is back, with the focus.
check(pump(10, lambda: line_seen("window: back to the sheet")), "the window goes back to the sheet after the result")
check(pump(10, lambda: (lambda row: row is not None and row.getState().contains(pyatspi.STATE_FOCUSED))(find(pyatspi.ROLE_LIST_ITEM, "Notes"))),
      "the sheet's Notes is back in the tree, with the focus")

# Edit, through AT-SPI alone: each share activity is a check box, checked when on; pressing
# Notes's turns it off (a state-changed:checked event), Done goes back to a sheet without it.
edit = find(pyatspi.ROLE_PUSH_BUTTON, "Edit")
if not check(edit is not None and "Action" in edit.get_interfaces(), "the sheet's button \"Edit\" (Action)"):
    finish(1)
edit.queryAction().doAction(0)
check(pump(10, lambda: line_seen("window: edit ")), "pressing Edit shows the activities")
box = None


def notes_box():
    global box
    box = find(pyatspi.ROLE_CHECK_BOX, "Notes")
    return box is not None


if not check(pump(10, notes_box), "Notes is a check box in Edit"):
    dump("the window's tree when Edit was shown")
    finish(1)
check(box.getState().contains(pyatspi.STATE_CHECKABLE) and box.getState().contains(pyatspi.STATE_CHECKED), "Notes's check box is checked (on)")
del events[:]
box.queryAction().doAction(0)
check(pump(10, lambda: line_seen("window: Notes turned off")), "pressing it turns Notes off")
check(pump(10, lambda: any(e[0] == "object:state-changed:checked" and e[3] == 0 for e in events)), "an object:state-changed:checked event says so")
done = find(pyatspi.ROLE_PUSH_BUTTON, "Done")
check(done is not None, "Edit's Done button")
done.queryAction().doAction(0)
check(pump(10, lambda: line_seen("window: sheet offers nothing")), "Done: the sheet again, without Notes")
check(pump(10, lambda: find(pyatspi.ROLE_LIST_ITEM, "Notes") is None), "Notes is no longer in the sheet's list")
finish(1 if failures else 0)
