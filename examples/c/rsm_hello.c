/*
 * An RSMAPI program as it would have been written for Solaris: an exporter shares a page
 * and waits for a signal; an importer writes a greeting into it and signals; the exporter
 * prints it and signals back. Build:
 *
 *     cargo xtask capi
 *     export PKG_CONFIG_PATH=$PWD/target/capi/lib/pkgconfig
 *     cc examples/c/rsm_hello.c $(pkg-config --cflags --libs rsm) -o rsm_hello
 *
 * Run (same host; RSM_NODE_ID names each process's node):
 *
 *     RSM_NODE_ID=1 ./rsm_hello export loopback          # prints the segment id
 *     RSM_NODE_ID=2 ./rsm_hello import loopback 1 SEGID
 */
#include <rsmapi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, int err)
{
	fprintf(stderr, "%s failed: %d\n", what, err);
	return 1;
}

static int exporter(rsmapi_controller_handle_t ctrl)
{
	rsm_memseg_export_handle_t seg;
	rsm_memseg_id_t id = 0;
	long page = sysconf(_SC_PAGESIZE);
	char *mem;
	int err;

	if (posix_memalign((void **)&mem, (size_t)page, (size_t)page) != 0)
		return fail("posix_memalign", 0);
	memset(mem, 0, (size_t)page);
	if ((err = rsm_memseg_export_create(ctrl, &seg, mem, (size_t)page, 0)) != RSM_SUCCESS)
		return fail("rsm_memseg_export_create", err);
	if ((err = rsm_memseg_export_publish(seg, &id, NULL, 0)) != RSM_SUCCESS)
		return fail("rsm_memseg_export_publish", err);
	printf("segment %u\n", id);
	fflush(stdout);
	if ((err = rsm_intr_signal_wait(seg, 30000)) != RSM_SUCCESS)
		return fail("rsm_intr_signal_wait", err);
	printf("got: %s\n", mem);
	fflush(stdout);
	if ((err = rsm_intr_signal_post(seg, 0)) != RSM_SUCCESS) /* the answer */
		return fail("rsm_intr_signal_post", err);
	rsm_memseg_export_destroy(seg);
	free(mem);
	return 0;
}

static int importer(rsmapi_controller_handle_t ctrl, rsm_node_id_t node, rsm_memseg_id_t id)
{
	rsm_memseg_import_handle_t im;
	rsmapi_barrier_t bar;
	static char msg[] = "hello from an RSMAPI program";
	int err;

	if ((err = rsm_memseg_import_connect(ctrl, node, id, RSM_PERM_RDWR, &im)) != RSM_SUCCESS)
		return fail("rsm_memseg_import_connect", err);
	if ((err = rsm_memseg_import_init_barrier(im, RSM_BARRIER_NODE, &bar)) != RSM_SUCCESS)
		return fail("rsm_memseg_import_init_barrier", err);
	if ((err = rsm_memseg_import_put(im, 0, msg, sizeof msg)) != RSM_SUCCESS)
		return fail("rsm_memseg_import_put", err);
	if ((err = rsm_intr_signal_post(im, 0)) != RSM_SUCCESS)
		return fail("rsm_intr_signal_post", err);
	if ((err = rsm_intr_signal_wait(im, 30000)) != RSM_SUCCESS) /* the exporter read it */
		return fail("rsm_intr_signal_wait", err);
	rsm_memseg_import_destroy_barrier(&bar);
	rsm_memseg_import_disconnect(im);
	printf("sent\n");
	return 0;
}

int main(int argc, char **argv)
{
	rsmapi_controller_handle_t ctrl;
	int err, rc;

	if (argc < 3 || (strcmp(argv[1], "import") == 0 && argc != 5)) {
		fprintf(stderr, "usage: rsm_hello export CTRL | rsm_hello import CTRL NODE SEGID\n");
		return 2;
	}
	if ((err = rsm_get_controller(argv[2], &ctrl)) != RSM_SUCCESS)
		return fail("rsm_get_controller", err);
	if (strcmp(argv[1], "export") == 0)
		rc = exporter(ctrl);
	else
		rc = importer(ctrl, (rsm_node_id_t)strtoul(argv[3], NULL, 10),
		    (rsm_memseg_id_t)strtoul(argv[4], NULL, 10));
	rsm_release_controller(ctrl);
	return rc;
}
