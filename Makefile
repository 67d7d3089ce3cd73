# pmwal: durable commits through a ring of persistent memory (PGXS)

MODULE_big = pmwal
OBJS = \
	$(WIN32RES) \
	binding.o \
	flusher.o \
	interpose.o \
	pmwal.o \
	restore.o \
	restore_timeline.o \
	ring_file.o \
	ring_format.o \
	state.o \
	status.o \
	test_pause.o \
	wal_ring.o \
	wal_sync.o

EXTENSION = pmwal
DATA = pmwal--1.0.sql pmwal--1.0--1.1.sql pmwal--1.1--2.0.0.sql pmwal--2.0.0.sql
PGFILEDESC = "pmwal - durable commits through a ring of persistent memory"

SHLIB_LINK += -lpmem
# PostgreSQL 15's headers trip -Wunused-parameter under -Wextra.
PG_CPPFLAGS += -Wno-unused-parameter

# The build for pmwal's own tests (tools/test, CI): test-only pause points
# (test_pause.c) and the setting pmwal.test_pause.  Release builds and
# packages leave it out.
ifdef PMWAL_TEST
PG_CPPFLAGS += -DPMWAL_TEST_PAUSES
endif

# pg_regress runs against its own server, which preloads pmwal on an
# emulated ring in /dev/shm (the configuration is written below).
REGRESS = status guc permissions
REGRESS_OPTS = --temp-config=./tmp_regress.conf --temp-instance=./tmp_regress
TAP_TESTS = 1
EXTRA_CLEAN = tmp_regress tmp_regress.conf

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The regression server's ring is emulated pmem, on a path of its own,
# created afresh for each run (a new cluster would not own the old ring).
REGRESS_RING = /dev/shm/pmwal_regress_$(shell id -u).ring
installcheck: export PMEM_IS_PMEM_FORCE = 1
installcheck: tmp_regress.conf
.PHONY: tmp_regress.conf
tmp_regress.conf:
	rm -f $(REGRESS_RING)
	printf "%s\n" "shared_preload_libraries = 'pmwal'" \
		"pmwal.path = '$(REGRESS_RING)'" "pmwal.size = 8MB" > $@

# Only the TAP tests; "make installcheck" runs pg_regress and then these.
.PHONY: prove_installcheck
prove_installcheck:
	$(prove_installcheck)

# The offline tool pmwal_ctl is a frontend program with its own makefile.
all: pmwal_ctl
.PHONY: pmwal_ctl
pmwal_ctl:
	$(MAKE) -C pmwal_ctl
install: install-pmwal_ctl
.PHONY: install-pmwal_ctl
install-pmwal_ctl:
	$(MAKE) -C pmwal_ctl install
clean: clean-pmwal_ctl
.PHONY: clean-pmwal_ctl
clean-pmwal_ctl:
	$(MAKE) -C pmwal_ctl clean

# The power-loss harness the TAP tests run the server under (an LD_PRELOAD
# library, independent of PostgreSQL); built here so a build failure shows
# at build time, not as a failing test.
all: powercut
.PHONY: powercut clean-powercut
powercut:
	$(MAKE) -C tools/powercut
clean: clean-powercut
clean-powercut:
	$(MAKE) -C tools/powercut clean

# PGXS tracks no header dependencies without --enable-depend: every object
# depends on the shared headers, or a changed struct layout goes unnoticed.
$(OBJS): pmwal.h ring_format.h
