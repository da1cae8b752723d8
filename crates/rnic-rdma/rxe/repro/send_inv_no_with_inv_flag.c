/* The receive completion of a SEND_WITH_INV carries the invalidated rkey but not the
 * IBV_WC_WITH_INV flag: the kernel writes its own IB_WC_WITH_INVALIDATE bit (1 << 2), which
 * is IBV_WC_IP_CSUM_OK in libibverbs (IBV_WC_WITH_INV is 1 << 3). */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct pair p;
	struct ibv_wc wc;

	repro_name = "send-inv-no-with-inv-flag";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	p = connect_pair(&d, pd, pd);
	mw = bound_type2(pd, p.resp, p.resp_cq, mr, 8192, 256, IBV_ACCESS_REMOTE_READ);
	post_recv(p.resp, mr, 0, 64, 7);
	{
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_SEND_WITH_INV };
		wr.invalidate_rkey = mw->rkey;
		wc = exec(p.req, p.req_cq, &wr);
	}
	if (wc.status != IBV_WC_SUCCESS)
		die("SEND_WITH_INV: %s", ibv_wc_status_str(wc.status));
	if (!poll_one(p.resp_rcq, &wc, 10))
		die("no receive completion");
	if (wc.status != IBV_WC_SUCCESS || wc.invalidated_rkey != mw->rkey)
		die("receive: %s, invalidated_rkey %#x (window %#x)", ibv_wc_status_str(wc.status),
		    wc.invalidated_rkey, mw->rkey);
	if (wc.wc_flags & IBV_WC_WITH_INV)
		verdict(0, "wc_flags %#x", wc.wc_flags);
	verdict(1, "wc_flags %#x, invalidated_rkey %#x right", wc.wc_flags, wc.invalidated_rkey);
}
