// CProto: the wire schema (remoteview.proto) and the C code protobuf-c generates from it
// (scripts/gen-proto), nothing else. The thin C shims for system calls live in CRemoteViewLinux.
#ifndef REMOTEVIEW_CPROTO_H
#define REMOTEVIEW_CPROTO_H

#include "remoteview.pb-c.h"

#endif
