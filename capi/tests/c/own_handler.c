#define _DEFAULT_SOURCE
/*
 * A C program keeps its signal handlers (DESIGN.md §3.1): it installs its own SIGINT and
 * SIGTERM handlers before its first RSMAPI call, opens a controller (shm's first endpoint
 * installs handlers of its own), and sees its handlers still in place and run when the
 * signals are raised; the signals it left alone have their default action, not that of a
 * handler a library libfabric needs installed before main. Usage: own_handler CONTROLLER
 */
#include <rsmapi.h>
#include <signal.h>
#include <string.h>
#include "check.h"

static volatile sig_atomic_t got_int, got_term;

static void on_int(int sig)
{
	(void)sig;
	got_int = 1;
}

static void on_term(int sig)
{
	(void)sig;
	got_term = 1;
}

static void install(int sig, void (*handler)(int))
{
	struct sigaction a;

	memset(&a, 0, sizeof(a));
	a.sa_handler = handler;
	sigemptyset(&a.sa_mask);
	ASSERT(sigaction(sig, &a, NULL) == 0);
}

static int handled_by(int sig, void (*handler)(int))
{
	struct sigaction a;

	ASSERT(sigaction(sig, NULL, &a) == 0);
	return a.sa_handler == handler;
}

int main(int argc, char **argv)
{
	rsmapi_controller_handle_t ctrl;
	int left_alone[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGHUP, SIGQUIT};

	ASSERT(argc == 2);
	install(SIGINT, on_int);
	install(SIGTERM, on_term);
	OK(rsm_get_controller(argv[1], &ctrl));
	ASSERT(handled_by(SIGINT, on_int));
	ASSERT(handled_by(SIGTERM, on_term));
	for (size_t i = 0; i < sizeof(left_alone) / sizeof(left_alone[0]); i++)
		ASSERT(handled_by(left_alone[i], SIG_DFL));
	ASSERT(raise(SIGINT) == 0);
	ASSERT(got_int);
	ASSERT(raise(SIGTERM) == 0);
	ASSERT(got_term);
	OK(rsm_release_controller(ctrl));
	printf("HANDLED\n");
	return 0;
}
