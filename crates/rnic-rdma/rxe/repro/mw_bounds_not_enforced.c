/* A remote access through a window is checked against the range of the window's region, not
 * the window's own range: a WRITE one byte before the window succeeds. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *local;
	struct ibv_mw *mw;
	struct pair p;
	struct ibv_wc wc;
	uint8_t *mem;
	enum ibv_wc_status st;

	repro_name = "mw-bounds-not-enforced";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	local = new_mr(pd, IBV_ACCESS_LOCAL_WRITE);
	p = connect_pair(&d, pd, pd);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw, "ibv_alloc_mw");
	/* The window is [8192, 8448) of the region. */
	st = bind_mw_on(p.req, p.req_cq, mw, mr, 8192, 256,
		  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (st != IBV_WC_SUCCESS)
		die("bind: %s", ibv_wc_status_str(st));
	memset(local->addr, 0xee, 8);
	mem = mr->addr;
	wc = do_rdma(&p, IBV_WR_RDMA_WRITE, local, 0, 8, (uintptr_t)mem + 8191, mw->rkey);
	if (wc.status == IBV_WC_SUCCESS && mem[8191] == 0xee)
		verdict(1, "WRITE at window start - 1 succeeded and wrote the byte");
	if (wc.status == IBV_WC_SUCCESS)
		die("the WRITE succeeded but wrote nothing");
	verdict(0, "WRITE rejected: %s", ibv_wc_status_str(wc.status));
}
