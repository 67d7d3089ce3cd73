# pmwal: durable commits through a ring of persistent memory (PGXS)

MODULE_big = pmwal
# the extension's sources, one concern per file (docs/README.md has the map)
OBJS = \
	$(WIN32RES) \
	src/binding.o \
	src/flusher.o \
	src/interpose.o \
	src/pmwal.o \
	src/restore.o \
	src/restore_timeline.o \
	src/ring_file.o \
	src/ring_format.o \
	src/state.o \
	src/status.o \
	src/test_pause.o \
	src/wal_ring.o \
	src/wal_sync.o

EXTENSION = pmwal
DATA = pmwal--1.0.sql pmwal--1.0--1.1.sql pmwal--1.1--2.0.0.sql pmwal--2.0.0.sql
PGFILEDESC = "pmwal - durable commits through a ring of persistent memory"

SHLIB_LINK += -lpmem
# PostgreSQL 15's headers trip -Wunused-parameter under -Wextra.
PG_CPPFLAGS += -Wno-unused-parameter

# The build for pmwal's own tests (tools/test, CI): test-only pause points
# (src/test_pause.c) and the setting pmwal.test_pause.  Release builds and
# packages leave it out.
ifdef PMWAL_TEST
PG_CPPFLAGS += -DPMWAL_TEST_PAUSES
endif

# pg_regress runs against its own server, which preloads pmwal on an
# emulated ring in /dev/shm (the configuration is written below).
REGRESS = status guc permissions
REGRESS_OPTS = --temp-config=./tmp_regress.conf --temp-instance=./tmp_regress
# The TAP tests (t/) need the test build: several hold processes at its
# pause points.  "make installcheck" of a release build (pgxn check, a
# package's tests) runs pg_regress only; tools/test passes PMWAL_TEST=1.
ifdef PMWAL_TEST
TAP_TESTS = 1
endif
EXTRA_CLEAN = tmp_regress tmp_regress.conf

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The regression server's ring is emulated pmem, on a path of its own (one
# per user and build directory, so that two test runs do not share it),
# created afresh for each run (a new cluster would not own the old ring).
REGRESS_RING = /dev/shm/pmwal_regress_$(shell id -u)_$(shell printf '%s' '$(CURDIR)' | cksum | cut -d' ' -f1).ring
installcheck: export PMEM_IS_PMEM_FORCE = 1
installcheck: tmp_regress.conf
.PHONY: tmp_regress.conf
tmp_regress.conf:
	rm -f $(REGRESS_RING)
	printf "%s\n" "shared_preload_libraries = 'pmwal'" \
		"pmwal.path = '$(REGRESS_RING)'" "pmwal.size = 8MB" > $@
ifdef DESTDIR
# "make installcheck DESTDIR=..." tests what "make install DESTDIR=..." staged
# there, not what the server's own directories hold (pg_buildext installcheck
# during a package build, tools/dist-check): Debian's PostgreSQL looks for
# extensions under extension_destdir first, for libraries under
# dynamic_library_path.  Other builds of PostgreSQL lack extension_destdir.
	printf "%s\n" "extension_destdir = '$(DESTDIR)'" \
		"dynamic_library_path = '$(DESTDIR)$(pkglibdir):\$$libdir'" >> $@
endif

# Only the TAP tests; "make installcheck" runs pg_regress and then these (in
# the test build).
.PHONY: prove_installcheck
prove_installcheck:
	$(prove_installcheck)

# The PGXN distribution archive, pmwal-VERSION.zip, of git's HEAD, from git
# (tools/dist: uncommitted changes are not in it).
.PHONY: dist
dist:
	tools/dist

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
# library, independent of PostgreSQL); built with the test build so a build
# failure shows at build time, not as a failing test.  Release builds
# (packages, PGXN) leave it out: it is no part of pmwal, and with CFLAGS in
# the environment (dpkg-buildpackage) it would inherit PostgreSQL's warning
# flags under its -Werror.
ifdef PMWAL_TEST
all: powercut
endif
.PHONY: powercut clean-powercut
powercut:
	$(MAKE) -C tools/powercut
clean: clean-powercut
clean-powercut:
	$(MAKE) -C tools/powercut clean

# PGXS tracks no header dependencies without --enable-depend: every object
# depends on the shared headers, or a changed struct layout goes unnoticed.
$(OBJS): src/pmwal.h src/ring_format.h
