#define _DEFAULT_SOURCE
/*
 * The importing half of the C tests: connects to the exporter's segment and calls every
 * import-side function, successfully and with each bad argument it documents
 * (capi/tests/c_programs.rs runs it). Usage: importer CONTROLLER NODE SEGID MYNODE
 */
#include <rsmapi.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include "check.h"

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 7 + seed); }

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(i, seed);
}

static void verify(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(i, seed)) {
			fprintf(stderr, "byte %zu: %u, expected %u\n", i, p[i], pattern(i, seed));
			exit(1);
		}
}

static void modes_and_barriers(rsm_memseg_import_handle_t im, rsmapi_barrier_t *bar)
{
	rsm_barrier_mode_t mode;
	rsmapi_barrier_t zero;
	unsigned char b = 1;

	memset(&zero, 0, sizeof zero);
	OK(rsm_memseg_import_get_mode(im, &mode));
	ASSERT(mode == RSM_BARRIER_MODE_IMPLICIT);
	EXPECT(rsm_memseg_import_get_mode(NULL, &mode), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_get_mode(im, NULL), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_import_set_mode(im, (rsm_barrier_mode_t)7), RSMERR_BAD_MODE);
	EXPECT(rsm_memseg_import_set_mode(NULL, RSM_BARRIER_MODE_IMPLICIT), RSMERR_BAD_SEG_HNDL);
	/* Implicit mode needs an initialised barrier (DESIGN.md, decision 2). */
	EXPECT(rsm_memseg_import_put(im, 0, &b, 1), RSMERR_BARRIER_UNINITIALIZED);
	EXPECT(rsm_memseg_import_init_barrier(NULL, RSM_BARRIER_NODE, bar), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_init_barrier(im, RSM_BARRIER_NODE, NULL), RSMERR_BAD_BARRIER_PTR);
	EXPECT(rsm_memseg_import_open_barrier(NULL), RSMERR_BAD_BARRIER_PTR);
	EXPECT(rsm_memseg_import_open_barrier(&zero), RSMERR_BARRIER_UNINITIALIZED);
	EXPECT(rsm_memseg_import_order_barrier(NULL), RSMERR_BAD_BARRIER_PTR);
	EXPECT(rsm_memseg_import_order_barrier(&zero), RSMERR_BARRIER_UNINITIALIZED);
	EXPECT(rsm_memseg_import_close_barrier(NULL), RSMERR_BAD_BARRIER_PTR);
	EXPECT(rsm_memseg_import_close_barrier(&zero), RSMERR_BARRIER_UNINITIALIZED);
	EXPECT(rsm_memseg_import_destroy_barrier(NULL), RSMERR_BAD_BARRIER_PTR);
	EXPECT(rsm_memseg_import_destroy_barrier(&zero), RSMERR_BARRIER_UNINITIALIZED);
	OK(rsm_memseg_import_init_barrier(im, RSM_BARRIER_NODE, bar));
}

/* Explicit mode: operations between open and close, order, and the barrier's errors. */
static void explicit_mode(rsm_memseg_import_handle_t im, rsmapi_barrier_t *bar)
{
	uint64_t v = 0x0102030405060708ull, back = 0;

	OK(rsm_memseg_import_set_mode(im, RSM_BARRIER_MODE_EXPLICIT));
	EXPECT(rsm_memseg_import_close_barrier(bar), RSMERR_BARRIER_NOT_OPENED);
	EXPECT(rsm_memseg_import_order_barrier(bar), RSMERR_BARRIER_NOT_OPENED);
	OK(rsm_memseg_import_open_barrier(bar));
	EXPECT(rsm_memseg_import_open_barrier(bar), RSMERR_BARRIER_OPEN_FAILED);
	OK(rsm_memseg_import_put64(im, 6000 & ~7, &v, 1));
	OK(rsm_memseg_import_order_barrier(bar));
	OK(rsm_memseg_import_get64(im, 6000 & ~7, &back, 1));
	OK(rsm_memseg_import_close_barrier(bar));
	ASSERT(back == v);
	OK(rsm_memseg_import_set_mode(im, RSM_BARRIER_MODE_IMPLICIT));
}

/* The bad arguments of get and put, in the order the original checks them. */
static void putget_errors(rsm_memseg_import_handle_t im, size_t len)
{
	uint64_t items[4] = {0};
	unsigned char *bytes = (unsigned char *)items;

	EXPECT(rsm_memseg_import_put(NULL, 0, bytes, 8), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_get(NULL, 0, bytes, 8), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_put(im, 0, NULL, 8), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_import_get(im, 0, NULL, 8), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_import_put8(im, 0, NULL, 1), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_import_get8(NULL, 0, bytes, 1), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_put16(im, 0, (uint16_t *)(bytes + 1), 1), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_get16(im, 1, (uint16_t *)bytes, 1), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_put32(im, 2, (uint32_t *)bytes, 1), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_get32(im, 0, (uint32_t *)(bytes + 2), 1), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_put64(im, 4, items, 1), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_get64(im, 0, (uint64_t *)(bytes + 4), 1), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_put(im, -1, bytes, 8), RSMERR_BAD_OFFSET);
	EXPECT(rsm_memseg_import_get(im, (off_t)len + 8, bytes, 8), RSMERR_BAD_OFFSET);
	EXPECT(rsm_memseg_import_put(im, (off_t)len - 4, bytes, 8), RSMERR_BAD_LENGTH);
	EXPECT(rsm_memseg_import_get64(im, (off_t)len - 8, items, 2), RSMERR_BAD_LENGTH);
	EXPECT(rsm_memseg_import_put8(im, (off_t)len, bytes, 1), RSMERR_BAD_LENGTH);
	OK(rsm_memseg_import_get(im, 0, bytes, 0));
	OK(rsm_memseg_import_put16(im, 0, (uint16_t *)bytes, 0));
}

/* Data, byte for byte: the byte calls and every width with repeat counts. */
static void putget_data(rsm_memseg_import_handle_t im)
{
	unsigned char out[1000], in[1000];
	uint8_t b8[100], r8[100];
	uint16_t b16[64], r16[64];
	uint32_t b32[32], r32[32];
	uint64_t b64[16], r64[16];
	size_t i;

	fill(out, sizeof out, 1);
	OK(rsm_memseg_import_put(im, 0, out, sizeof out));
	OK(rsm_memseg_import_get(im, 0, in, sizeof in));
	verify(in, sizeof in, 1);
	for (i = 0; i < 100; i++) b8[i] = (uint8_t)(i * 3 + 1);
	for (i = 0; i < 64; i++) b16[i] = (uint16_t)(i * 0x0101 + 0x1234);
	for (i = 0; i < 32; i++) b32[i] = (uint32_t)(i * 0x01010101u + 0x89abcdefu);
	for (i = 0; i < 16; i++) b64[i] = (uint64_t)i * 0x0101010101010101ull + 0x0123456789abcdefull;
	OK(rsm_memseg_import_put8(im, 1024, b8, 100));
	OK(rsm_memseg_import_put16(im, 2048, b16, 64));
	OK(rsm_memseg_import_put32(im, 3072, b32, 32));
	OK(rsm_memseg_import_put64(im, 4096, b64, 16));
	OK(rsm_memseg_import_get8(im, 1024, r8, 100));
	OK(rsm_memseg_import_get16(im, 2048, r16, 64));
	OK(rsm_memseg_import_get32(im, 3072, r32, 32));
	OK(rsm_memseg_import_get64(im, 4096, r64, 16));
	ASSERT(memcmp(b8, r8, sizeof b8) == 0);
	ASSERT(memcmp(b16, r16, sizeof b16) == 0);
	ASSERT(memcmp(b32, r32, sizeof b32) == 0);
	ASSERT(memcmp(b64, r64, sizeof b64) == 0);
	/* The typed writes are the bytes a byte read sees, in this host's order. */
	OK(rsm_memseg_import_get(im, 2048, in, sizeof b16));
	ASSERT(memcmp(in, b16, sizeof b16) == 0);
}

/* putv and getv with local memory handles and addresses, residuals, and their errors. */
static void vectors(rsmapi_controller_handle_t ctrl, rsm_memseg_import_handle_t im, size_t page)
{
	rsm_localmemory_handle_t lh, lh2;
	rsm_scat_gath_t sg;
	rsm_iovec_t iov[17];
	unsigned char *a, *b, va[300], vb[300];

	ASSERT(posix_memalign((void **)&a, page, page) == 0);
	ASSERT(posix_memalign((void **)&b, page, page) == 0);
	fill(a, page, 5);
	memset(b, 0, page);
	fill(va, sizeof va, 6);
	EXPECT(rsm_create_localmemory_handle(ctrl, &lh, (caddr_t)(a + 1), page), RSMERR_BAD_ADDR);
	EXPECT(rsm_create_localmemory_handle(NULL, &lh, (caddr_t)a, page), RSMERR_BAD_CTLR_HNDL);
	EXPECT(rsm_create_localmemory_handle(ctrl, NULL, (caddr_t)a, page), RSMERR_BAD_LOCALMEM_HNDL);
	EXPECT(rsm_create_localmemory_handle(ctrl, &lh, (caddr_t)a, 0), RSMERR_BAD_LENGTH);
	EXPECT(rsm_create_localmemory_handle(ctrl, &lh, (caddr_t)a, (size_t)1 << 56), RSMERR_BAD_ADDR);
	OK(rsm_create_localmemory_handle(ctrl, &lh, (caddr_t)a, page));
	OK(rsm_create_localmemory_handle(ctrl, &lh2, (caddr_t)b, page));

	memset(&sg, 0, sizeof sg);
	memset(iov, 0, sizeof iov);
	iov[0].io_type = RSM_HANDLE_TYPE;
	iov[0].local.handle = lh;
	iov[0].local_offset = 100;
	iov[0].remote_offset = 12288;
	iov[0].transfer_length = 500;
	iov[1].io_type = RSM_VA_TYPE;
	iov[1].local.vaddr = (caddr_t)va;
	iov[1].remote_offset = 13000;
	iov[1].transfer_length = sizeof va;
	sg.remote_handle = im;
	sg.io_request_count = 2;
	sg.iovec = iov;
	EXPECT(rsm_memseg_import_putv(NULL), RSMERR_BAD_SGIO);
	EXPECT(rsm_memseg_import_getv(NULL), RSMERR_BAD_SGIO);
	sg.remote_handle = NULL;
	EXPECT(rsm_memseg_import_putv(&sg), RSMERR_BAD_SEG_HNDL);
	sg.remote_handle = im;
	sg.io_request_count = 0;
	EXPECT(rsm_memseg_import_putv(&sg), RSMERR_BAD_SGIO);
	sg.io_request_count = RSM_MAX_SGIOREQS + 1;
	EXPECT(rsm_memseg_import_getv(&sg), RSMERR_BAD_SGIO);
	sg.io_request_count = 2;
	OK(rsm_memseg_import_putv(&sg));
	ASSERT(sg.io_residual_count == 0);

	/* Back into the second handle and a plain buffer. */
	iov[0].local.handle = lh2;
	iov[1].local.vaddr = (caddr_t)vb;
	OK(rsm_memseg_import_getv(&sg));
	ASSERT(sg.io_residual_count == 0);
	verify(b + 100, 500, 5 + 100 * 7);
	verify(vb, sizeof vb, 6);

	/* A bad second entry: the first moves, two are residual. */
	iov[1].io_type = 9;
	iov[2] = iov[0];
	sg.io_request_count = 3;
	memset(b, 0, page);
	EXPECT(rsm_memseg_import_getv(&sg), RSMERR_BAD_SGIO);
	ASSERT(sg.io_residual_count == 2);
	verify(b + 100, 500, 5 + 100 * 7);
	iov[1].io_type = RSM_HANDLE_TYPE;
	iov[1].local.handle = (rsm_localmemory_handle_t)(void *)va;
	EXPECT(rsm_memseg_import_putv(&sg), RSMERR_BAD_LOCALMEM_HNDL);
	ASSERT(sg.io_residual_count == 2);

	/* Hostile address entries: refused before a buffer of their length is made or their
	 * bytes are read; nothing moves. */
	iov[0].io_type = RSM_VA_TYPE;
	iov[0].local.vaddr = (caddr_t)va;
	iov[0].local_offset = 0;
	iov[0].remote_offset = 0;
	iov[0].transfer_length = (size_t)1 << 44;
	sg.io_request_count = 1;
	EXPECT(rsm_memseg_import_getv(&sg), RSMERR_BAD_LENGTH);
	ASSERT(sg.io_residual_count == 1);
	EXPECT(rsm_memseg_import_putv(&sg), RSMERR_BAD_LENGTH);
	iov[0].transfer_length = 8;
	iov[0].remote_offset = (size_t)1 << 44;
	EXPECT(rsm_memseg_import_getv(&sg), RSMERR_BAD_OFFSET);
	iov[0].remote_offset = 0;
	iov[0].local.vaddr = (caddr_t)page; /* the first pages are never mapped */
	EXPECT(rsm_memseg_import_getv(&sg), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_import_putv(&sg), RSMERR_BAD_ADDR);
	iov[0].local.vaddr = (caddr_t)va;
	iov[0].local_offset = (size_t)0 - 4;
	EXPECT(rsm_memseg_import_putv(&sg), RSMERR_BAD_ADDR);

	EXPECT(rsm_free_localmemory_handle(NULL, lh), RSMERR_BAD_CTLR_HNDL);
	EXPECT(rsm_free_localmemory_handle(ctrl, NULL), RSMERR_BAD_LOCALMEM_HNDL);
	OK(rsm_free_localmemory_handle(ctrl, lh));
	OK(rsm_free_localmemory_handle(ctrl, lh2));
	EXPECT(rsm_free_localmemory_handle(ctrl, lh), RSMERR_BAD_LOCALMEM_HNDL);
	free(a);
	free(b);
}

/* Mapping: a real pointer on one host, whatever the controller. */
static void mapping(rsm_memseg_import_handle_t im, size_t page, unsigned seed)
{
	void *addr = NULL;
	unsigned char check[16];

	EXPECT(rsm_memseg_import_map(NULL, &addr, RSM_MAP_NONE, RSM_PERM_RDWR, 0, page), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_map(im, NULL, RSM_MAP_NONE, RSM_PERM_RDWR, 0, page), RSMERR_BAD_ADDR);
	EXPECT(rsm_memseg_import_map(im, &addr, RSM_MAP_NONE, 0700, 0, page), RSMERR_BAD_PERMS);
	EXPECT(rsm_memseg_import_map(im, &addr, RSM_MAP_NONE, RSM_PERM_RDWR, 0, 0), RSMERR_BAD_LENGTH);
	EXPECT(rsm_memseg_import_map(im, &addr, RSM_MAP_NONE, RSM_PERM_RDWR, 8, page), RSMERR_BAD_MEM_ALIGNMENT);
	EXPECT(rsm_memseg_import_unmap(NULL), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_unmap(im), RSMERR_SEG_NOT_MAPPED);
	OK(rsm_memseg_import_map(im, &addr, RSM_MAP_NONE, RSM_PERM_RDWR, 0, 2 * page));
	ASSERT(addr != NULL);
	verify((unsigned char *)addr, 1000, seed);
	((unsigned char *)addr)[page + 5] = 0xee;
	OK(rsm_memseg_import_get(im, (off_t)page, check, sizeof check));
	ASSERT(check[5] == 0xee);
	EXPECT(rsm_memseg_import_map(im, &addr, RSM_MAP_NONE, RSM_PERM_RDWR, 0, page), RSMERR_SEG_ALREADY_MAPPED);
	/* Mapped, put and get reach only the window. */
	EXPECT(rsm_memseg_import_get(im, (off_t)(3 * page), check, 1), RSMERR_BAD_OFFSET);
	EXPECT(rsm_memseg_import_disconnect(im), RSMERR_SEG_STILL_MAPPED);
	OK(rsm_memseg_import_unmap(im));
	EXPECT(rsm_memseg_import_unmap(im), RSMERR_SEG_NOT_MAPPED);
}

static void topology_and_ids(rsm_node_id_t me)
{
	rsm_topology_t *t = NULL;
	rsm_memseg_id_t base = 0;
	uint32_t n = 0;

	EXPECT(rsm_get_interconnect_topology(NULL), RSMERR_BAD_TOPOLOGY_PTR);
	OK(rsm_get_interconnect_topology(&t));
	ASSERT(t != NULL && t->topology_hdr.local_nodeid == me);
	for (uint_t i = 0; i < t->topology_hdr.local_cntlr_count; i++) {
		rsm_connections_t *c = t->connections[i];
		ASSERT(strlen(c->hdr.cntlr_name) > 0 && c->hdr.remote_cntlr_count >= 0);
		for (int j = 0; j < c->hdr.remote_cntlr_count; j++)
			ASSERT(c->remote_cntlr[j].connection_state == RSM_CONNECTION_ACTIVE);
	}
	rsm_free_interconnect_topology(t);
	rsm_free_interconnect_topology(NULL);

	EXPECT(rsm_get_segmentid_range(NULL, &base, &n), RSMERR_BAD_ADDR);
	EXPECT(rsm_get_segmentid_range("SUNWctest", NULL, &n), RSMERR_BAD_ADDR);
	EXPECT(rsm_get_segmentid_range("SUNWctest", &base, NULL), RSMERR_BAD_ADDR);
	EXPECT(rsm_get_segmentid_range("nosuch", &base, &n), RSMERR_BAD_APPID);
	OK(rsm_get_segmentid_range("SUNWctest", &base, &n));
	ASSERT(base == 0x600000 && n == 1000);
}

int main(int argc, char **argv)
{
	rsmapi_controller_handle_t ctrl;
	rsm_memseg_import_handle_t im, bad;
	rsmapi_barrier_t bar;
	struct pollfd pfd, other[1];
	unsigned char in[1000], b = 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 4 * page;
	int n = 0, pipefd[2];
	rsm_node_id_t node, me;
	rsm_memseg_id_t id;

	if (argc != 5) {
		fprintf(stderr, "usage: importer CONTROLLER NODE SEGID MYNODE\n");
		return 2;
	}
	node = (rsm_node_id_t)strtoul(argv[2], NULL, 10);
	id = (rsm_memseg_id_t)strtoul(argv[3], NULL, 10);
	me = (rsm_node_id_t)strtoul(argv[4], NULL, 10);
	OK(rsm_get_controller(argv[1], &ctrl));

	EXPECT(rsm_memseg_import_connect(NULL, node, id, RSM_PERM_RDWR, &im), RSMERR_BAD_CTLR_HNDL);
	EXPECT(rsm_memseg_import_connect(ctrl, node, id, RSM_PERM_RDWR, NULL), RSMERR_BAD_SEG_HNDL);
	EXPECT(rsm_memseg_import_connect(ctrl, node, id, 0700, &bad), RSMERR_PERM_DENIED);
	EXPECT(rsm_memseg_import_connect(ctrl, node, id + 1, RSM_PERM_RDWR, &bad), RSMERR_SEG_NOT_PUBLISHED);
	OK(rsm_memseg_import_connect(ctrl, node, id, RSM_PERM_RDWR, &im));

	modes_and_barriers(im, &bar);
	putget_errors(im, len);
	putget_data(im);
	explicit_mode(im, &bar);
	vectors(ctrl, im, page);

	/* 1: tell the exporter the data is there; it answers with pattern 2 at 8192. */
	OK(rsm_memseg_get_pollfd(im, &pfd));
	EXPECT(rsm_memseg_import_disconnect(im), RSMERR_POLLFD_IN_USE);
	ASSERT(pipe(pipefd) == 0);
	other[0].fd = pipefd[0];
	other[0].events = POLLIN;
	EXPECT(rsm_intr_signal_wait_pollfd(other, 1, 20, &n), RSMERR_TIMEOUT);
	EXPECT(rsm_intr_signal_wait_pollfd(NULL, 1, 20, &n), RSMERR_BAD_ADDR);
	{
		/* nfds far past the array: refused (beyond RLIMIT_NOFILE, as poll(2) refuses it, or
		 * past mapped memory), never written past; a read-only array is refused, untouched. */
		struct pollfd *ro = mmap(NULL, page, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int r = rsm_intr_signal_wait_pollfd(other, (nfds_t)1 << 30, 20, &n);
		ASSERT(r == RSMERR_BAD_ARGS_ERRORS || r == RSMERR_BAD_ADDR);
		ASSERT(ro != MAP_FAILED);
		ro[0] = other[0];
		ASSERT(mprotect(ro, page, PROT_READ) == 0);
		EXPECT(rsm_intr_signal_wait_pollfd(ro, 1, 20, &n), RSMERR_BAD_ADDR);
		ASSERT(ro[0].events == POLLIN);
		ASSERT(munmap(ro, page) == 0);
	}
	OK(rsm_intr_signal_post(im, 0));
	OK(rsm_intr_signal_wait_pollfd(&pfd, 1, 20000, NULL));
	OK(rsm_memseg_release_pollfd(im));
	OK(rsm_memseg_release_pollfd(im)); /* never below zero */
	OK(rsm_memseg_import_get(im, 8192, in, sizeof in));
	verify(in, sizeof in, 2);

	/* 2: the exporter rebinds to memory holding pattern 3. */
	OK(rsm_intr_signal_post(im, RSM_SIGPOST_NO_ACCUMULATE));
	EXPECT(rsm_intr_signal_wait(NULL, 10), RSMERR_BAD_SEG_HNDL);
	OK(rsm_intr_signal_wait(im, 20000));
	OK(rsm_memseg_import_get(im, 0, in, sizeof in));
	verify(in, sizeof in, 3);

	mapping(im, page, 3);
	topology_and_ids(me);

	OK(rsm_memseg_import_destroy_barrier(&bar));
	EXPECT(rsm_memseg_import_destroy_barrier(&bar), RSMERR_BARRIER_UNINITIALIZED);
	EXPECT(rsm_memseg_import_get8(im, 0, &b, 1), RSMERR_BARRIER_UNINITIALIZED);

	/* 3: done; the exporter answers, then destroys its segment. A post right before a
	 * disconnect may be dropped with the connection on tcp0 and shm0, so wait for the
	 * answer first. */
	OK(rsm_intr_signal_post(im, 0));
	OK(rsm_intr_signal_wait(im, 20000));
	EXPECT(rsm_memseg_import_disconnect(NULL), RSMERR_BAD_SEG_HNDL);
	OK(rsm_memseg_import_disconnect(im));
	EXPECT(rsm_memseg_import_disconnect(im), RSMERR_BAD_SEG_HNDL);
	OK(rsm_release_controller(ctrl));
	printf("DONE\n");
	return 0;
}
