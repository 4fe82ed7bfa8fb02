# Developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

BUILD_LOG := .build/make-test-build.log
NETWORK_BUILD_LOG := .build/make-test-network-build.log

.PHONY: demo test docs bench clean

# The libraries whose DocC catalogs `make docs` builds (and `make test` checks).
DOC_TARGETS := RemoteCore RemoteHost RemoteService

# make demo ARGS="..."
demo:
	scripts/bootstrap
	swift build --product demo-share
	.build/debug/demo-share $(ARGS)

test:
	scripts/bootstrap
	scripts/gen-proto --check
	mkdir -p .build
	$(MAKE) --no-print-directory -C Examples/uppercase-c all check
# The frozen service of protocol version 1 (Tests/FrozenPeers/v1), which FrozenPeerTests launch.
	$(MAKE) --no-print-directory -C Tests/FrozenPeers/v1 all
	swift build --build-tests 2>&1 | tee $(BUILD_LOG)
# Fail on warnings from our own Sources/Tests; dependencies' warnings (.build/checkouts) are
# ignored. Only recompiled files emit warnings, so an incremental build can miss some; CI builds
# from scratch.
	@grep -E '^/.*/(Sources|Tests)/.*: warning:' $(BUILD_LOG) | grep -v '/\.build/' | sort -u >.build/warnings.txt || true
	@if [[ -s .build/warnings.txt ]]; then \
	  echo "error: compiler warnings in project sources:"; cat .build/warnings.txt; exit 1; \
	fi
# Serial: the tests count this process's fds and children to catch leaks.
	swift test --skip-build --no-parallel --disable-xctest
	$(MAKE) --no-print-directory docs
# The gateway (Network/, a package of its own: gRPC-Swift and its TLS, BoringSSL, add about 6
# minutes to a first build on two cores; docs/Gateway.md). Same warning rule for its sources.
	cd Network && swift build --build-tests 2>&1 | tee ../$(NETWORK_BUILD_LOG)
	@grep -E '^/.*/Network/(Sources|Tests)/.*: warning:' $(NETWORK_BUILD_LOG) | grep -v '/\.build/' | sort -u >.build/network-warnings.txt || true
	@if [[ -s .build/network-warnings.txt ]]; then \
	  echo "error: compiler warnings in Network/ sources:"; cat .build/network-warnings.txt; exit 1; \
	fi
	cd Network && swift test --skip-build --no-parallel --disable-xctest

# Each library's documentation (DocC, through swift-docc-plugin) into .build/docs/TARGET;
# any warning fails, an unresolved symbol link or an undocumented parameter among them.
docs:
	@mkdir -p .build/docs
	@for target in $(DOC_TARGETS); do \
	  echo "documentation: $$target"; \
	  swift package --disable-sandbox generate-documentation --target $$target --warnings-as-errors \
	    --output-path .build/docs/$$target >.build/docs-$$target.log 2>&1 \
	    || { grep -E -A4 '^(warning|error):' .build/docs-$$target.log; echo "error: the documentation of $$target does not build (log: .build/docs-$$target.log)"; exit 1; }; \
	done

# Every benchmark figure next to its baseline, in one run (release build; see Benchmarks/).
# make bench ARGS="--json"
# Without ARGS, as root with perf: then the counts per round trip, from a second build with the
# LockCounts trait (Benchmarks/.build-counts), so the figures above are from a build without it.
# protobuf-c and libstdc++ are linked from their archives (Benchmarks/raw/static-link.sh); Cairo
# stays shared, since Pango, loaded at a process's first text, draws with the shared libcairo.
STATIC_LINK := $(CURDIR)/Benchmarks/.build/static-link
bench:
	scripts/bootstrap --bench
	Benchmarks/raw/static-link.sh $(STATIC_LINK)
	cd Benchmarks && PKG_CONFIG_PATH=$(STATIC_LINK) swift build -c release
	Benchmarks/.build/release/remoteview-bench $(ARGS)
	@if [ -n "$(ARGS)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v perf >/dev/null; then \
	  ( cd Benchmarks && for product in bench-service remoteview-bench; do \
	      PKG_CONFIG_PATH=$(STATIC_LINK) swift build -c release --traits LockCounts --scratch-path .build-counts --product $$product || exit 1; \
	    done ) && \
	  Benchmarks/.build-counts/release/remoteview-bench --counts || echo "counts per round trip: remoteview-bench --counts failed (above)" >&2; \
	else echo "counts per round trip: skipped (remoteview-bench --counts needs root and perf)"; fi

clean:
	swift package clean
