/* A SEND longer than the receive buffer completes the receive with IBV_WC_LOC_QP_OP_ERR, not
 * IBV_WC_LOC_LEN_ERR. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pair p;
	struct ibv_wc wc, rwc;
	struct ibv_sge s;

	repro_name = "recv-overflow-status";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE);
	p = connect_pair(&d, pd, pd);
	post_recv(p.resp, mr, 0, 16, 7);
	s = sge_of(mr, 4096, 32);
	{
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_SEND, .sg_list = &s,
					  .num_sge = 1 };
		wc = exec(p.req, p.req_cq, &wr);
	}
	if (!poll_one(p.resp_rcq, &rwc, 10))
		die("no receive completion");
	if (rwc.status == IBV_WC_LOC_LEN_ERR)
		verdict(0, "receive: %s", ibv_wc_status_str(rwc.status));
	verdict(1, "receive: %s (send: %s)", ibv_wc_status_str(rwc.status),
		ibv_wc_status_str(wc.status));
}
