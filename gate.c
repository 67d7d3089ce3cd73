/*-------------------------------------------------------------------------
 *
 * gate.c
 *		Statements that take irreversible steps on the strength of their own
 *		WAL flush run while no write without fsync can be open.
 *
 * COMMIT PREPARED and ROLLBACK PREPARED flush their record and then, still
 * inside the statement, unlink the prepared transaction's state file and
 * the files of relations it dropped.  DROP DATABASE flushes the in-place
 * update that marks the database invalid and then removes its directories.
 * Another backend's write without fsync can make such a flush a no-op
 * (the flush pointer is already past it), and until that backend's ring
 * copy is done only the page cache holds the record: a power cut there
 * would leave the files gone and the record lost.  pmwal's commit callback
 * comes too late for these steps.
 *
 * So these statements pause new write windows (commits meanwhile are
 * flushed the ordinary way, FALLBACK_PAUSED), wait for the open ones to
 * close, make sure everything flushed so far is covered, and then run:
 * every flush they do is a real one.  The pause is released when the
 * statement ends, even by an error.
 *
 * IDENTIFICATION
 *		gate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "pmwal.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/* This transaction ran COMMIT or ROLLBACK PREPARED (reset at its end). */
static bool finishing_prepared = false;

/* Is "stmt" one whose own flushes must be real?  See the file header. */
static bool
needs_real_flushes(Node *stmt, bool *is_2pc)
{
	*is_2pc = false;
	if (IsA(stmt, TransactionStmt))
	{
		TransactionStmtKind kind = ((TransactionStmt *) stmt)->kind;

		*is_2pc = kind == TRANS_STMT_COMMIT_PREPARED ||
			kind == TRANS_STMT_ROLLBACK_PREPARED;
		return *is_2pc;
	}
	return IsA(stmt, DropdbStmt);
}

bool
pmwal_finishing_prepared(void)
{
	bool		was = finishing_prepared;

	finishing_prepared = false;
	return was;
}

static void
run_statement(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			  ProcessUtilityContext context, ParamListInfo params,
			  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
							queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

static void
pmwal_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	bool		two_phase;

	if (pmwal_ring == NULL || !needs_real_flushes(pstmt->utilityStmt, &two_phase))
	{
		run_statement(pstmt, queryString, readOnlyTree, context, params,
					  queryEnv, dest, qc);
		return;
	}

	finishing_prepared = two_phase;
	pg_atomic_fetch_add_u32(&pmwal_shared->paused, 1);
	PG_TRY();
	{
		wait_for_writes_closed();
		pmwal_ensure_durable(GetFlushRecPtr(NULL), false);
		PMWAL_PAUSE_POINT("gate_paused");
		run_statement(pstmt, queryString, readOnlyTree, context, params,
					  queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		pg_atomic_fetch_sub_u32(&pmwal_shared->paused, 1);
	}
	PG_END_TRY();
}

void
pmwal_gate_init(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = pmwal_ProcessUtility;
}
