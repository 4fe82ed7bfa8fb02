// System calls a hostile service tries from inside its sandbox, for the security suite. Each
// returns 0 when the call succeeded (the attack got through) or the errno it failed with.
#ifndef REMOTEVIEW_CHOSTILECALLS_H
#define REMOTEVIEW_CHOSTILECALLS_H

/// Runs the attack `name`; returns 0 on success, the errno otherwise, or -1 for an unknown name.
int hostile_call(const char *_Nonnull name);

#endif
