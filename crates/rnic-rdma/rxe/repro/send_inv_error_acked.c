/* A SEND_WITH_INV whose invalidation fails (here: a wrong key byte) is not NAKed: the
 * requester's send completes successfully, while the responder's receive completes with
 * IBV_WC_REM_INV_REQ_ERR and the responder QP enters ERR. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct pair p;
	struct ibv_wc wc, rwc;

	repro_name = "send-inv-error-acked";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	p = connect_pair(&d, pd, pd);
	mw = bound_type2(pd, p.resp, p.resp_cq, mr, 8192, 256, IBV_ACCESS_REMOTE_READ);
	post_recv(p.resp, mr, 0, 64, 7);
	{
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_SEND_WITH_INV };
		wr.invalidate_rkey = ibv_inc_rkey(mw->rkey);
		wc = exec(p.req, p.req_cq, &wr);
	}
	if (!poll_one(p.resp_rcq, &rwc, 10))
		die("no receive completion");
	if (wc.status == IBV_WC_SUCCESS)
		verdict(1, "send: %s; receive: %s", ibv_wc_status_str(wc.status),
			ibv_wc_status_str(rwc.status));
	verdict(0, "send: %s", ibv_wc_status_str(wc.status));
}
