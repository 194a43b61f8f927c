#define _DEFAULT_SOURCE
/*
 * The exporting half of the C tests: creates and publishes a segment over its own memory,
 * checks every bad argument of the export-side calls, and answers the importer's signals
 * (capi/tests/c_programs.rs runs it). Usage: exporter CONTROLLER
 */
#include <rsmapi.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "check.h"

#define SEG_PAGES 4

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 7 + seed); }

static void fill(unsigned char *p, size_t off, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[off + i] = pattern(i, seed);
}

static void verify(const unsigned char *p, size_t off, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[off + i] != pattern(i, seed)) {
			fprintf(stderr, "byte %zu: %u, expected %u\n", off + i, p[off + i],
			    pattern(i, seed));
			exit(1);
		}
}

static void controllers(const char *name, rsmapi_controller_handle_t *ctrl)
{
	rsmapi_controller_handle_t again;
	rsmapi_controller_attr_t attr;
	char bad[] = "nosuch0";

	EXPECT(rsm_get_controller((char *)name, NULL), RSMERR_BAD_CTLR_HNDL);
	EXPECT(rsm_get_controller(bad, &again), RSMERR_CTLR_NOT_PRESENT);
	OK(rsm_get_controller((char *)name, ctrl));
	OK(rsm_get_controller((char *)name, &again));
	ASSERT(again == *ctrl);
	OK(rsm_release_controller(again));
	EXPECT(rsm_get_controller_attr(NULL, &attr), RSMERR_BAD_CTLR_HNDL);
	EXPECT(rsm_get_controller_attr(*ctrl, NULL), RSMERR_BAD_ADDR);
	OK(rsm_get_controller_attr(*ctrl, &attr));
	ASSERT(attr.attr_page_size > 0);
	EXPECT(rsm_release_controller(NULL), RSMERR_BAD_CTLR_HNDL);
}

/* Every bad argument of create, publish, unpublish and republish, on a scratch segment. */
static void export_errors(rsmapi_controller_handle_t ctrl, size_t page)
{
	rsm_memseg_export_handle_t seg;
	rsm_memseg_id_t id = 0;
	rsmapi_access_entry_t acl[1] = {{1, 0666}};
	unsigned char *mem = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT(mem != MAP_FAILED);
	ASSERT(munmap(mem + 2 * page, page) == 0);

	EXPECT(rsm_memseg_export_create(NULL, &seg, mem, page, 0), RSMERR_BAD_CTLR_HNDL);
	EXPECT(rsm_memseg_export_create(ctrl, NULL, mem, page, 0), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_export_create(ctrl, &seg, NULL, page, 0), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_export_create(ctrl, &seg, mem, 0, 0), RSMERR_BAD_LENGTH);
	EXPECT(rsm_memseg_export_create(ctrl, &seg, mem + 8, page, 0), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_export_create(ctrl, &seg, mem, page + 8, 0), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_export_create(ctrl, &seg, mem + page, 2 * page, 0), RSMERR_BAD_ADDR);
	/* Hostile sizes: refused, never allocated for (2^56 bytes; past the address space). */
	EXPECT(rsm_memseg_export_create(ctrl, &seg, mem, (size_t)1 << 56, 0), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_export_create(ctrl, &seg, mem, (size_t)0 - page, 0), RSMERR_BAD_ADDR);
	OK(rsm_memseg_export_create(ctrl, &seg, mem, 2 * page, 0));

	EXPECT(rsm_memseg_export_publish(seg, NULL, NULL, 0), RSMERR_BAD_SEGID);
	EXPECT(rsm_memseg_export_publish(NULL, &id, NULL, 0), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_export_publish(seg, &id, NULL, 1), RSMERR_BAD_ACL);
	id = 0x100;
	EXPECT(rsm_memseg_export_publish(seg, &id, acl, 1), RSMERR_RESERVED_SEGID);
	EXPECT(rsm_memseg_export_republish(seg, acl, 1), RSMERR_SEG_NOT_PUBLISHED);
	EXPECT(rsm_memseg_export_unpublish(seg), RSMERR_SEG_NOT_PUBLISHED);
	id = 0x400000 + (rsm_memseg_id_t)(getpid() % 0x100000);
	OK(rsm_memseg_export_publish(seg, &id, acl, 1));
	EXPECT(rsm_memseg_export_publish(seg, &id, acl, 1), RSMERR_SEG_ALREADY_PUBLISHED);
	EXPECT(rsm_memseg_export_republish(NULL, acl, 1), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_export_republish(seg, NULL, 1), RSMERR_BAD_ACL);
	OK(rsm_memseg_export_republish(seg, NULL, 0));
	EXPECT(rsm_memseg_export_unpublish(NULL), RSMERR_BAD_SEG_HNDL);
	OK(rsm_memseg_export_unpublish(seg));
	EXPECT(rsm_memseg_export_rebind(seg, mem, 0, 2 * page), RSMERR_REBIND_NOT_ALLOWED);
	EXPECT(rsm_memseg_export_destroy(NULL), RSMERR_BAD_SEG_HNDL);
	OK(rsm_memseg_export_destroy(seg));
	EXPECT(rsm_memseg_export_destroy(seg), RSMERR_BAD_SEG_HNDL);
	munmap(mem, 2 * page);
}

/* A fork child touching the parent's handles gets error codes, not a crash. */
static void fork_child(rsmapi_controller_handle_t ctrl, rsm_memseg_export_handle_t seg)
{
	int status = 0;
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		rsmapi_controller_handle_t c;
		int ok = rsm_memseg_export_unpublish(seg) == RSMERR_NOT_CREATOR &&
		    rsm_get_controller((char *)"loopback", &c) == RSMERR_CTLR_NOT_PRESENT &&
		    rsm_release_controller(ctrl) == RSMERR_BAD_CTLR_HNDL;
		_exit(ok ? 0 : 1);
	}
	ASSERT(waitpid(pid, &status, 0) == pid);
	ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv)
{
	rsmapi_controller_handle_t ctrl;
	rsm_memseg_export_handle_t seg;
	rsm_memseg_id_t id = 0;
	struct pollfd fds[2];
	int pipefd[2], n = 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = SEG_PAGES * page;
	unsigned char *mem, *mem2;

	if (argc != 2) {
		fprintf(stderr, "usage: exporter CONTROLLER\n");
		return 2;
	}
	controllers(argv[1], &ctrl);
	export_errors(ctrl, page);

	ASSERT(posix_memalign((void **)&mem, page, len) == 0);
	ASSERT(posix_memalign((void **)&mem2, page, len) == 0);
	memset(mem, 0, len);
	fill(mem2, 0, len, 3);
	OK(rsm_memseg_export_create(ctrl, &seg, mem, len, RSM_ALLOW_REBIND));
	OK(rsm_memseg_export_publish(seg, &id, NULL, 0));
	ASSERT(id >= 0x80000000u);
	EXPECT(rsm_intr_signal_wait(seg, 10), RSMERR_TIMEOUT);
	fork_child(ctrl, seg);

	EXPECT(rsm_memseg_get_pollfd(NULL, &fds[0]), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_get_pollfd(seg, NULL), RSMERR_BAD_ADDR);
	OK(rsm_memseg_get_pollfd(seg, &fds[0]));
	ASSERT(fds[0].events & POLLRDNORM);
	EXPECT(rsm_memseg_export_destroy(seg), RSMERR_POLLFD_IN_USE);
	ASSERT(pipe(pipefd) == 0);
	fds[1].fd = pipefd[0];
	fds[1].events = POLLIN;

	printf("READY %u\n", id);
	fflush(stdout);

	/* 1: the importer wrote pattern 1 at 0 and its typed items; check our own memory. */
	OK(rsm_intr_signal_wait_pollfd(fds, 2, 20000, &n));
	ASSERT(n == 1 && fds[0].revents == POLLRDNORM && fds[1].revents == 0);
	verify(mem, 0, 1000, 1);
	/* Answer with pattern 2 at 8192, written by plain stores. */
	fill(mem, 8192, 1000, 2);
	EXPECT(rsm_intr_signal_post(NULL, 0), RSMERR_BAD_SEG_HNDL);
	OK(rsm_intr_signal_post(seg, 0));

	/* 2: rebind to memory holding pattern 3 everywhere. */
	OK(rsm_intr_signal_wait(seg, 20000));
	EXPECT(rsm_memseg_export_rebind(NULL, mem2, 0, len), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_export_rebind(seg, NULL, 0, len), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_export_rebind(seg, mem2, 0, len - page), RSMERR_BAD_LENGTH);
	OK(rsm_memseg_export_rebind(seg, mem2, 0, len));
	verify(mem, 0, 1000, 1); /* the old range keeps what it held */
	OK(rsm_intr_signal_post(seg, 0));

	/* 3: the importer is done; let it go. */
	OK(rsm_intr_signal_wait(seg, 20000));
	OK(rsm_intr_signal_post(seg, 0));
	EXPECT(rsm_memseg_release_pollfd(NULL), RSMERR_BAD_SEG_HNDL);
	OK(rsm_memseg_release_pollfd(seg));
	OK(rsm_memseg_export_destroy(seg));
	verify(mem2, 0, 100, 3); /* still ours, readable, after destroy */
	mem2[0] = 1;
	OK(rsm_release_controller(ctrl));
	EXPECT(rsm_release_controller(ctrl), RSMERR_BAD_CTLR_HNDL);
	free(mem);
	free(mem2);
	printf("DONE\n");
	return 0;
}
